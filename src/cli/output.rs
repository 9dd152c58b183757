//! Writing an output directory atomically. Files go to a fresh sibling directory first and
//! are renamed into place, so a failed build leaves the previous output as it was. mpipec
//! records what it wrote in `.mpipec-manifest`; an existing directory holding anything else
//! is never replaced, unless `--force`, which keeps the foreign files and replaces only
//! mpipec's own. Ctrl-C (or SIGTERM) while the files are written stops the writers, removes
//! the staging directory and then ends the process by that signal: nothing is half-written.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use mpipe::outputs::{Artifact, Output};

use super::loader::io_reason;

pub const MANIFEST: &str = ".mpipec-manifest";

fn manifest_of(dir: &Path) -> Option<BTreeSet<String>> {
    let text = fs::read_to_string(dir.join(MANIFEST)).ok()?;
    Some(text.lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
}

/// Every file under `dir`, as paths relative to it.
fn files_in(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().into_owned());
            }
        }
    }
    Ok(out)
}

fn sibling(out: &Path, tag: &str) -> PathBuf {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    out.with_file_name(format!(".{name}.{tag}-{}", std::process::id()))
}

/// [`write_atomically`], keeping mpipec's other files already in `out`.
pub fn write_merged(out: &Path, mut files: Vec<Output<'_>>, force: bool) -> Result<(), String> {
    for old in manifest_of(out).unwrap_or_default() {
        if !files.iter().any(|f| f.path == old)
            && let Ok(contents) = fs::read_to_string(out.join(&old))
        {
            files.push(Artifact { path: old, contents }.into());
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    write_atomically(out, files, force)
}

/// One file, through the writer of its output; a failed write fails the whole build.
fn write_file(path: &Path, output: &Output<'_>) -> std::io::Result<()> {
    let mut file = Interruptible(fs::File::create(path)?);
    output.write_to(&mut file)?;
    file.flush()
}

/// The signal that interrupted the writing, 0 while none has.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// A file that stops taking bytes once the writing is interrupted.
struct Interruptible(fs::File);

impl Write for Interruptible {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if INTERRUPTED.load(Ordering::Relaxed) != 0 {
            // Not `ErrorKind::Interrupted`, which `write_all` retries.
            return Err(std::io::Error::other("interrupted"));
        }
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

const CAUGHT: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Catches Ctrl-C and SIGTERM while an output directory is written.
fn catch_interrupts() {
    for signal in CAUGHT {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
}

/// Restores the default handling and, if the writing was interrupted, says what was left and
/// ends the process by the signal that came, as if it had not been caught.
fn release_interrupts(shown: &str, written: bool) {
    for signal in CAUGHT {
        // SAFETY: restoring the default disposition.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    let signal = INTERRUPTED.load(Ordering::SeqCst);
    if signal != 0 {
        match written {
            true => eprintln!("interrupted after `{shown}` was written"),
            false => eprintln!("interrupted: nothing was written to `{shown}`"),
        }
        // SAFETY: raising a signal whose default action ends the process.
        unsafe {
            libc::raise(signal);
        }
    }
}

/// Writes `files` into `out`, each streamed from its writer into its file.
pub fn write_atomically(out: &Path, files: Vec<Output<'_>>, force: bool) -> Result<(), String> {
    let files = &files[..];
    let shown = out.display();
    let existing = if out.exists() {
        if !out.is_dir() {
            return Err(format!("cannot write `{shown}`: it exists and is not a directory"));
        }
        let present = files_in(out).map_err(|e| format!("cannot read `{shown}`: {}", io_reason(e)))?;
        let ours = manifest_of(out).unwrap_or_default();
        let foreign: Vec<&String> = present.iter().filter(|f| *f != MANIFEST && !ours.contains(*f)).collect();
        if !foreign.is_empty() && !force {
            let list: Vec<&str> = foreign.iter().take(3).map(|s| s.as_str()).collect();
            return Err(format!(
                "refusing to write into `{shown}`: it holds files mpipec did not write ({}{})\nhelp: choose another output directory, or pass `--force` to replace only mpipec's files and keep the others",
                list.join(", "),
                if foreign.len() > 3 { ", …" } else { "" }
            ));
        }
        Some(foreign.into_iter().cloned().collect::<Vec<String>>())
    } else {
        None
    };
    let staging = sibling(out, "new");
    catch_interrupts();
    let result = (|| -> std::io::Result<()> {
        if staging.exists() {
            fs::remove_dir_all(&staging)?;
        }
        fs::create_dir_all(&staging)?;
        let mut manifest = String::new();
        for f in files {
            if let Some(parent) = staging.join(&f.path).parent() {
                fs::create_dir_all(parent)?;
            }
            manifest.push_str(&f.path);
            manifest.push('\n');
        }
        // Each file is formatted on its own thread: the large ones take about as long each.
        std::thread::scope(|scope| {
            let writers: Vec<_> = files.iter().map(|f| scope.spawn(|| write_file(&staging.join(&f.path), f))).collect();
            writers.into_iter().try_for_each(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        })?;
        fs::write(staging.join(MANIFEST), manifest)?;
        match &existing {
            None => fs::rename(&staging, out)?,
            Some(foreign) if foreign.is_empty() => {
                let old = sibling(out, "old");
                if old.exists() {
                    fs::remove_dir_all(&old)?;
                }
                fs::rename(out, &old)?;
                fs::rename(&staging, out)?;
                fs::remove_dir_all(&old)?;
            }
            Some(_) => {
                // --force over foreign files: replace mpipec's own files one by one, keep the rest.
                for old in manifest_of(out).unwrap_or_default() {
                    let _ = fs::remove_file(out.join(old));
                }
                for f in files.iter().map(|f| f.path.as_str()).chain([MANIFEST]) {
                    let target = out.join(f);
                    if let Some(parent) = target.parent() {
                        fs::create_dir_all(parent)?;
                    }
                    fs::rename(staging.join(f), target)?;
                }
                fs::remove_dir_all(&staging)?;
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    release_interrupts(&shown.to_string(), result.is_ok());
    result.map_err(|e| format!("cannot write `{shown}`: {}", io_reason(e)))
}
