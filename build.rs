//! Embeds the Python package `python/mpipec` into the binary: `mpipec verify` and
//! `build --target torch` write it out (ARCHITECTURE.md, "The Python package"), so that a binary
//! installed with cargo runs the same runtime as the wheel carries.

use std::path::{Path, PathBuf};

fn python_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            python_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "py") {
            out.push(path);
        }
    }
}

/// FNV-1a over every file's name and text: the cache directory's key besides the version, so
/// that a changed package under an unchanged version is written anew.
fn fnv(files: &[(String, String)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, text) in files {
        for b in name.bytes().chain([0]).chain(text.bytes()).chain([0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let python = root.join("python");
    println!("cargo:rerun-if-changed={}", python.join("mpipec").display());
    let mut paths = Vec::new();
    python_files(&python.join("mpipec"), &mut paths);
    let mut files = Vec::new();
    for path in &paths {
        let name = path.strip_prefix(&python).expect("under python/").to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        files.push((name, text));
    }
    let mut code = String::from(
        "/// The Python package `mpipec`: (path under the package root, text).\npub const PACKAGE: &[(&str, &str)] = &[\n",
    );
    for (name, path) in files.iter().map(|(n, _)| n).zip(&paths) {
        code.push_str(&format!("    ({name:?}, include_str!({:?})),\n", path.display().to_string()));
    }
    code.push_str(&format!(
        "];\n\n/// A digest of [`PACKAGE`].\npub const PACKAGE_DIGEST: &str = \"{:016x}\";\n",
        fnv(&files)
    ));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("python_package.rs"), code).expect("writing python_package.rs");
}
