//! The `mpipec` command. All I/O of the project happens under `cli/`.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // `mpipec check … | head` should stop quietly when the pipe closes, as Unix tools do,
    // rather than fail writing to it.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // A build of a large plan allocates and frees hundreds of megabytes of vectors. By default
    // glibc maps each large one separately and unmaps it when freed, so the next faults its
    // pages in again: half the kernel time of a two-million-instruction build, and what made it
    // grow faster than linearly. Kept in the heap instead (docs/performance.md).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc parameters, set before any allocation of size and before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
    std::panic::set_hook(Box::new(|info| {
        eprintln!(
            "error: internal compiler error: mpipec {} crashed: {info}\n\
             note: this is a bug in mpipec, not in your plan; please report it with the plan that triggered it",
            mpipe::VERSION
        );
    }));
    cli::main()
}
