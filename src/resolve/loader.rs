//! How the compiler reaches other files. The library never touches the file system: the CLI
//! passes a loader over real files, tests and the language server pass one over memory.

/// A file a `use "…"` named, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Identity of the file (a canonical path): two imports of one file share it.
    pub key: String,
    /// What diagnostics call it.
    pub display: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    NotFound(String),
    OutsideRoot,
}

pub trait Loader {
    /// Resolves `relative`, written in the file whose key is `from`.
    fn resolve(&self, from: &str, relative: &str) -> Result<Resolved, ResolveError>;
    /// Reads a file by key.
    fn read(&self, key: &str) -> Result<Vec<u8>, String>;
}

/// Files held in memory, keyed by normalised relative path (`dir/a.mpipe`).
#[derive(Clone, Debug, Default)]
pub struct MemoryLoader {
    files: Vec<(String, String)>,
}

impl MemoryLoader {
    pub fn new() -> MemoryLoader {
        MemoryLoader::default()
    }

    pub fn with(mut self, name: &str, text: &str) -> MemoryLoader {
        self.insert(name, text);
        self
    }

    pub fn insert(&mut self, name: &str, text: &str) {
        let key = normalise("", name).unwrap_or_else(|| name.to_string());
        self.files.retain(|(k, _)| *k != key);
        self.files.push((key, text.to_string()));
    }
}

impl Loader for MemoryLoader {
    fn resolve(&self, from: &str, relative: &str) -> Result<Resolved, ResolveError> {
        let dir = from.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let key = normalise(dir, relative).ok_or(ResolveError::OutsideRoot)?;
        if self.files.iter().any(|(k, _)| *k == key) {
            Ok(Resolved { display: key.clone(), key })
        } else {
            Err(ResolveError::NotFound("no such file".into()))
        }
    }

    fn read(&self, key: &str) -> Result<Vec<u8>, String> {
        self.files
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, t)| t.clone().into_bytes())
            .ok_or_else(|| "no such file".into())
    }
}

/// Joins `relative` onto `dir` and folds `.` and `..`; `None` when `..` climbs above the root.
pub fn normalise(dir: &str, relative: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in dir.split('/').chain(relative.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}
