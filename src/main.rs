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
    std::panic::set_hook(Box::new(|info| {
        eprintln!(
            "error: internal compiler error: mpipec {} crashed: {info}\n\
             note: this is a bug in mpipec, not in your plan; please report it with the plan that triggered it",
            mpipe::VERSION
        );
    }));
    cli::main()
}
