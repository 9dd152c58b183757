//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mpipe::diagnostics::json::to_json;
use mpipe::diagnostics::render::{Style, render};
use mpipe::resolve::loader::MemoryLoader;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir`, recursively, sorted.
pub fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// All of tests/ui in memory (plans, and the histograms and profiles they name), keyed by path
/// relative to tests/ui.
pub fn ui_loader() -> MemoryLoader {
    let ui = root().join("tests/ui");
    let mut loader = MemoryLoader::new();
    for path in files_under(&ui, "mpipe").into_iter().chain(files_under(&ui, "csv")).chain(files_under(&ui, "json")) {
        let key = path.strip_prefix(&ui).unwrap().to_string_lossy().into_owned();
        loader.insert(&key, &String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
    }
    loader
}

/// The `// set: KEY=VALUE` lines at the top of a fixture: `--set` overrides to apply.
pub fn overrides(bytes: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(bytes)
        .lines()
        .take_while(|l| l.starts_with("//"))
        .filter_map(|l| l.strip_prefix("// set: "))
        .filter_map(|kv| mpipe::overrides::split(kv).map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// A plan fixture under tests/ui/ (libraries under `lib/` left out): its key (path below
/// tests/ui), path, bytes and `// set:` overrides.
pub struct Fixture {
    pub key: String,
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub set: Vec<(String, String)>,
}

pub fn ui_fixtures() -> Vec<Fixture> {
    let ui = root().join("tests/ui");
    files_under(&ui, "mpipe")
        .into_iter()
        .filter_map(|path| {
            let key = path.strip_prefix(&ui).unwrap().to_string_lossy().into_owned();
            if key.contains("/lib/") {
                return None;
            }
            let bytes = std::fs::read(&path).unwrap();
            let set = overrides(&bytes);
            Some(Fixture { key, path, bytes, set })
        })
        .collect()
}

/// Checks `bytes` as the file `key` and renders every diagnostic: (human, json lines).
pub fn check_rendered(key: &str, bytes: Vec<u8>, loader: &MemoryLoader) -> (mpipe::driver::Compiled, String, String) {
    let set = overrides(&bytes);
    let checked = mpipe::driver::load(key, key, bytes, loader).check(loader, &set);
    let sources = &checked.program.sources;
    let all = mpipe::diagnose(&checked, mpipe::Depth::Build);
    let human: String = all.iter().map(|d| render(d, sources, Style::Human, false)).collect();
    let json: String = all.iter().map(|d| to_json(d, sources) + "\n").collect();
    (checked, human, json)
}

/// The plans under `dirs` (relative to the repository) and what they import, in memory, keyed
/// by their path relative to the repository.
pub fn repo_loader(dirs: &[&str]) -> MemoryLoader {
    let mut loader = MemoryLoader::new();
    for dir in dirs {
        for ext in ["mpipe", "csv"] {
            for path in files_under(&root().join(dir), ext) {
                let key = path.strip_prefix(root()).unwrap().to_string_lossy().into_owned();
                loader.insert(&key, &std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    loader
}

/// (rank, index) of every replicated-stage backward that runs on a rank without its forward
/// (same stage, microbatch and images): a recomputed encoder's moved backwards.
pub fn moved_backwards(ir: &mpipe::ir::PlanIr) -> Vec<(usize, usize)> {
    use mpipe::ir::Op;
    let mut moved = Vec::new();
    for (r, rank) in ir.ranks.iter().enumerate() {
        let key = |i: &mpipe::ir::Instr| (i.stage, i.mb, i.images);
        let forwards: std::collections::HashSet<_> =
            rank.instructions.iter().filter(|i| i.op == Op::Forward).map(key).collect();
        for (k, i) in rank.instructions.iter().enumerate() {
            let replicated = i.stage.is_some_and(|s| ir.stages[s as usize].rank.is_none());
            if i.op == Op::Backward && replicated && !forwards.contains(&key(i)) {
                moved.push((r, k));
            }
        }
    }
    moved
}

/// What `bash scripts/NAME` prints on stdout: the tool or interpreter a setup script provides
/// (installing it the first time). Its stderr is not captured but goes straight to the test
/// process's own, which libtest leaves alone: what the script announces before a download (what
/// and how big) and the installer's progress reach the terminal of whoever runs `cargo test`,
/// and CI's log, while the download runs, not only once a test fails.
pub fn setup(name: &str) -> String {
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts").join(name))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "scripts/{name} failed ({}):\n{stdout}\n(its stderr is above)", out.status);
    stdout
}

/// The Python `scripts/torch-env` prints (torch, transformers, Pillow), set up once per test binary.
pub fn torch_python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| setup("torch-env"))
}

/// How many torch runs of one test binary go at once: each is several processes already, and
/// much of a run is Python start-up and ranks waiting on each other, which a second run fills
/// on two cores.
const TORCH_RUNS_AT_ONCE: usize = 2;
static TORCH_RUNNING: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
static TORCH_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// A place among the TORCH_RUNS_AT_ONCE runs, held until dropped.
pub struct TorchTurn;

pub fn torch_turn() -> TorchTurn {
    let mut running = torch_running();
    while *running >= TORCH_RUNS_AT_ONCE {
        running = TORCH_FREED.wait(running).unwrap_or_else(|e| e.into_inner());
    }
    *running += 1;
    TorchTurn
}

impl Drop for TorchTurn {
    fn drop(&mut self) {
        *torch_running() -= 1;
        TORCH_FREED.notify_one();
    }
}

fn torch_running() -> std::sync::MutexGuard<'static, usize> {
    TORCH_RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}
