//! The loader over real files. `use "…"` paths resolve against the importing file; symlinks
//! are resolved before the check that the result stays inside the plan's directory.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mpipe::resolve::loader::{Loader, ResolveError, Resolved, normalise};

pub struct FsLoader {
    root: PathBuf,
    allow_outside: bool,
    /// Files named on the command line (`--profile`), read wherever they are.
    named: Vec<PathBuf>,
    /// Canonical key -> the path shown for it, so imports read as the user wrote them.
    displays: RefCell<BTreeMap<String, String>>,
}

impl FsLoader {
    /// A loader for the plan at `path`; returns it with the plan's key.
    pub fn for_plan(path: &Path, allow_outside: bool) -> std::io::Result<(FsLoader, String)> {
        let canonical = path.canonicalize()?;
        let root = canonical.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(FsLoader::rooted(root, canonical.to_string_lossy().into_owned(), &path.to_string_lossy(), allow_outside))
    }

    /// A loader for a plan read from standard input and shown as `name`: its imports resolve
    /// against the working directory, as if it were a file there.
    pub fn for_stdin(name: &str, allow_outside: bool) -> std::io::Result<(FsLoader, String)> {
        let root = std::env::current_dir()?.canonicalize()?;
        let key = root.join(name).to_string_lossy().into_owned();
        Ok(FsLoader::rooted(root, key, name, allow_outside))
    }

    fn rooted(root: PathBuf, key: String, display: &str, allow_outside: bool) -> (FsLoader, String) {
        let displays = RefCell::new(BTreeMap::from([(key.clone(), display.to_string())]));
        (FsLoader { root, allow_outside, named: Vec::new(), displays }, key)
    }

    /// Lets the plan read `path`, outside its directory or not: the user named it.
    pub fn allow(&mut self, path: &Path) {
        if let Ok(canonical) = path.canonicalize() {
            self.named.push(canonical);
        }
    }
}

fn lowercase_first(s: String) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

impl Loader for FsLoader {
    fn resolve(&self, from: &str, relative: &str) -> Result<Resolved, ResolveError> {
        let dir = Path::new(from).parent().unwrap_or(Path::new(""));
        let joined = dir.join(relative);
        // Lexically first, so a path that climbs out is refused whether or not it exists;
        // then after resolving symlinks, so a link cannot smuggle a file in.
        let lexical = if Path::new(relative).is_absolute() {
            Some(Path::new(relative).canonicalize().unwrap_or_else(|_| PathBuf::from(relative)))
        } else {
            normalise(&dir.to_string_lossy(), relative).map(|p| PathBuf::from(format!("/{p}")))
        };
        let inside = |p: &Path| self.allow_outside || p.starts_with(&self.root) || self.named.iter().any(|n| n == p);
        if !lexical.as_deref().is_some_and(inside) {
            return Err(ResolveError::OutsideRoot);
        }
        let canonical = joined.canonicalize().map_err(|e| ResolveError::NotFound(lowercase_first(io_reason(e))))?;
        if !inside(&canonical) {
            return Err(ResolveError::OutsideRoot);
        }
        let key = canonical.to_string_lossy().into_owned();
        let from_display = self.displays.borrow().get(from).cloned().unwrap_or_else(|| from.to_string());
        let from_dir = from_display.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let display = if Path::new(relative).is_absolute() {
            relative.to_string()
        } else {
            normalise(from_dir, relative).filter(|d| !d.is_empty()).unwrap_or_else(|| key.clone())
        };
        let display =
            if from_display.starts_with('/') && !display.starts_with('/') { format!("/{display}") } else { display };
        self.displays.borrow_mut().entry(key.clone()).or_insert_with(|| display.clone());
        Ok(Resolved { key, display })
    }

    fn read(&self, key: &str) -> Result<Vec<u8>, String> {
        std::fs::read(key).map_err(|e| lowercase_first(io_reason(e)))
    }
}

pub fn io_reason(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::IsADirectory => "is a directory".into(),
        _ => e.to_string(),
    }
}
