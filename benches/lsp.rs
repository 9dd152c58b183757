//! How fast `mpipec lsp` answers a change to each example: the time from sending
//! `textDocument/didChange` to receiving that version's parse and check diagnostics, over
//! stdio, as an editor sees it (criterion; medians in the report). The build's diagnostics are
//! put off past the run (`diagnosticsDelayMs`), so they neither answer nor compete with a
//! change here; they come after the pause on their own thread.
//!
//! And how fast it answers hover (on a part, whose placement comes from the last finished
//! build), go to definition and completion in paper_512 while that plan builds: a save before
//! each request keeps the build thread busy (one build of paper_512 takes seconds), so every
//! request is timed against a running build. The target is 20 ms.

#[path = "../tests/support/lsp_client.rs"]
mod lsp_client;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use lsp_client::Client;
use serde_json::json;

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut plans: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mpipe"))
        .collect();
    plans.sort();
    plans
}

fn change(c: &mut Criterion) {
    let cache = std::env::temp_dir().join(format!("mpipec-lsp-bench-{}", std::process::id()));
    let mut group = c.benchmark_group("lsp change");
    group.measurement_time(Duration::from_secs(3));
    for path in examples() {
        let text = std::fs::read_to_string(&path).unwrap();
        let uri = format!("file://{}", path.display());
        let mut client = opened(&cache, 3_600_000, &uri, &text);
        // Opening builds at once; let that finish before timing changes.
        let _ = client.published();
        let mut version = 1;
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    version += 1;
                    // Every other change adds a line, so each one is a text the server has not seen.
                    let edited = if version % 2 == 0 { format!("{text}\n") } else { text.clone() };
                    client.change(&uri, version, &edited);
                    let (answered, _) = client.published();
                    assert_eq!(answered, version);
                }
                start.elapsed()
            })
        });
        client.stop();
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&cache);
}

/// `method` at `line`:`character` of the open paper_512, timed over stdio while it builds.
/// A language server (its cache in `cache`) with `text` open at `uri`, after the check that
/// opening publishes, which must find no error: the benches time a plan that checks.
fn opened(cache: &std::path::Path, delay_ms: u64, uri: &str, text: &str) -> Client {
    let mut client = Client::start(cache);
    client.initialize(json!({"diagnosticsDelayMs": delay_ms}));
    client.open(uri, text);
    let (_, checked) = client.published();
    assert!(checked.iter().all(|d| d["severity"] != 1), "{uri} does not check: {checked:?}");
    client
}

fn during_build(c: &mut Criterion) {
    let cache = std::env::temp_dir().join(format!("mpipec-lsp-bench-build-{}", std::process::id()));
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/paper_512.mpipe");
    let text = std::fs::read_to_string(&path).unwrap();
    let uri = format!("file://{}", path.display());
    let mut client = opened(&cache, 0, &uri, &text);
    let mut group = c.benchmark_group("lsp request while paper_512 builds");
    group.measurement_time(Duration::from_secs(5));
    let requests = [
        ("hover on a part", "textDocument/hover", 9, 5),
        ("go to definition", "textDocument/definition", 10, 12),
        ("completion", "textDocument/completion", 37, 18),
    ];
    for (name, method, line, character) in requests {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    client.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}}));
                    let params =
                        json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}});
                    let start = Instant::now();
                    let answer = client.request(method, params);
                    spent += start.elapsed();
                    assert!(!answer.is_null(), "{name} has an answer");
                }
                spent
            })
        });
    }
    group.finish();
    client.stop();
    let _ = std::fs::remove_dir_all(&cache);
}

criterion_group!(benches, change, during_build);
criterion_main!(benches);
