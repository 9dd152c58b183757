//! Writing an output directory atomically. Files go to a fresh sibling directory first and
//! are renamed into place, so a failed build leaves the previous output as it was. mpipec
//! records what it wrote in `.mpipec-manifest`; an existing directory holding anything else
//! is never replaced, unless `--force`, which keeps the foreign files and replaces only
//! mpipec's own.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    let mut file = fs::File::create(path)?;
    output.write_to(&mut file)?;
    file.flush()
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
    result.map_err(|e| {
        let _ = fs::remove_dir_all(&staging);
        format!("cannot write `{shown}`: {}", io_reason(e))
    })
}
