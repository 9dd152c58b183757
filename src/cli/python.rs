//! The Python that runs torch, and the package `mpipec` it imports: the copy embedded in this
//! binary, written once per version and digest under the user's cache directory and put first
//! on PYTHONPATH, so that a binary installed with cargo and one from the wheel run the same
//! runtime (ARCHITECTURE.md, "The Python package").

use std::path::{Path, PathBuf};
use std::process::Command;

/// The interpreter to run torch with: --python, $MPIPEC_PYTHON, the environment
/// `scripts/torch-env` keeps, python3.
pub fn interpreter(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("MPIPEC_PYTHON").map(PathBuf::from))
        .or_else(|| cached_env().filter(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// $XDG_CACHE_HOME, else ~/.cache.
fn cache_home() -> Option<PathBuf> {
    var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))
}

/// Where `scripts/torch-env` puts its Python: $MPIPEC_VENVS, else the cache home's
/// `mpipec-venvs`, then `torch/bin/python`.
fn cached_env() -> Option<PathBuf> {
    let venvs = var("MPIPEC_VENVS").or_else(|| cache_home().map(|c| c.join("mpipec-venvs")))?;
    Some(venvs.join("torch/bin/python"))
}

/// The directory holding this binary's copy of the package (`DIR/mpipec/...`), written on first
/// use: into a directory of its own, then renamed into place, so that a reader never sees half
/// of it and two processes writing at once both end with the whole.
pub fn package_root() -> Result<PathBuf, String> {
    let base = cache_home().unwrap_or_else(std::env::temp_dir).join("mpipec/python");
    let dir = base.join(format!("{}-{}", env!("CARGO_PKG_VERSION"), mpipe::backend::torch::PACKAGE_DIGEST));
    if dir.is_dir() {
        return Ok(dir);
    }
    let staging = base.join(format!(".staging-{}", std::process::id()));
    let written = write_package(&staging).and_then(|()| match std::fs::rename(&staging, &dir) {
        Err(_) if dir.is_dir() => std::fs::remove_dir_all(&staging),
        other => other,
    });
    written.map(|()| dir.clone()).map_err(|e| {
        let _ = std::fs::remove_dir_all(&staging);
        format!("cannot write the Python package to `{}`: {e}", dir.display())
    })
}

fn write_package(root: &Path) -> std::io::Result<()> {
    for (path, text) in mpipe::backend::torch::PACKAGE {
        let file = root.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(file, text)?;
    }
    Ok(())
}

/// `python -m module` with the package first on PYTHONPATH.
pub fn module(python: &Path, package: &Path, module: &str) -> Command {
    let mut path = std::ffi::OsString::from(package);
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = Command::new(python);
    cmd.args(["-m", module]).env("PYTHONPATH", path).env("PYTHONUNBUFFERED", "1");
    cmd
}
