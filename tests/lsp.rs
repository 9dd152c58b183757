//! `mpipec lsp` over stdio, driven as an editor would: initialize, open a file with two errors,
//! fix one, hover, go to definition (into the standard library), complete, format, shut down.
//! Then when the build's diagnostics come: after a pause in typing, on save, and never for a
//! text that a later change replaced.

#[path = "support/lsp_client.rs"]
mod lsp_client;

use std::time::Duration;

use lsp_client::Client;
use serde_json::{Value, json};

fn codes(diagnostics: &[Value]) -> Vec<&str> {
    diagnostics.iter().map(|d| d["code"].as_str().unwrap()).collect()
}

/// A fresh folder holding `text` as `plan.mpipe`, and that file's URI.
fn folder(name: &str, text: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("mpipec-lsp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plan.mpipe");
    std::fs::write(&path, text).unwrap();
    let uri = format!("file://{}", path.display());
    (dir, uri)
}

/// A server with `text` open as `<name>/plan.mpipe` in a fresh folder, started with these
/// `initializationOptions`, and that file's URI.
fn open(name: &str, options: Value, text: &str) -> (Client, String, std::path::PathBuf) {
    let (dir, uri) = folder(name, text);
    let mut c = Client::start(&dir.join("cache"));
    c.initialize(options);
    c.open(&uri, text);
    (c, uri, dir)
}

const PLAN: &str = "use std::hardware::h100_sxm;
use std::models::llama3_8b;

model lm {
    llm = llama3_8b;
}

cluster {
    hardware = h100_sxm;
    /* é😀 */ devices = 8GB;
    pp = 8;
}

batch {
    microbatches = 16;
    seq_len = 4096;
}

cut llm;
schedule 1fb1;
";

#[test]
fn an_editor_session() {
    let (dir, uri) = folder("session", PLAN);
    let mut c = Client::start(&dir.join("cache"));
    let capabilities = c.initialize(json!(null));
    assert_eq!(capabilities["hoverProvider"], true);
    assert_eq!(capabilities["positionEncoding"], "utf-16");
    assert_eq!(capabilities["textDocumentSync"]["save"], true, "saving is what runs the build at once");
    c.open(&uri, PLAN);
    let diags = c.published().1;
    let codes: Vec<&str> = diags.iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["E0205", "E0306"], "{diags:#?}");
    // `8GB` sits after a comment holding a two-unit emoji: UTF-16 column 24, not its byte 27.
    assert_eq!(diags[0]["range"]["start"], json!({"line": 9, "character": 24}));
    assert_eq!(diags[0]["range"]["end"], json!({"line": 9, "character": 27}));
    assert_eq!(diags[1]["range"]["start"], json!({"line": 19, "character": 9}));
    assert!(diags[1]["message"].as_str().unwrap().contains("did you mean `1f1b`?"));

    let fixed = PLAN.replace("1fb1", "1f1b");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": fixed}]}),
    );
    let diags = c.published().1;
    assert_eq!(diags.len(), 1);
    assert_eq!(diags[0]["code"], "E0205");

    let hover = c.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": {"line": 19, "character": 10}}),
    );
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(text.contains("**1f1b**") && text.contains("sharded"), "{text}");
    let hover = c
        .request("textDocument/hover", json!({"textDocument": {"uri": uri}, "position": {"line": 8, "character": 17}}));
    assert!(hover["contents"]["value"].as_str().unwrap().contains("hardware h100_sxm"), "{hover}");

    let def = c.request(
        "textDocument/definition",
        json!({"textDocument": {"uri": uri}, "position": {"line": 4, "character": 12}}),
    );
    let target = def["uri"].as_str().unwrap();
    assert!(target.ends_with("/models.mpipe"), "{target}");
    let file = target.strip_prefix("file://").unwrap();
    let line = def["range"]["start"]["line"].as_u64().unwrap() as usize;
    assert!(std::fs::read_to_string(file).unwrap().lines().nth(line).unwrap().contains("decoder llama3_8b"));

    let with_schedule = fixed.replace("schedule 1f1b;", "schedule ");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": with_schedule}]}),
    );
    let _ = c.published().1;
    let items = c.request(
        "textDocument/completion",
        json!({"textDocument": {"uri": uri}, "position": {"line": 19, "character": 9}}),
    );
    let labels: Vec<&str> = items.as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap()).collect();
    assert!(labels.contains(&"transpose") && labels.contains(&"interleaved"), "{labels:?}");
    let items = c.request(
        "textDocument/completion",
        json!({"textDocument": {"uri": uri}, "position": {"line": 10, "character": 4}}),
    );
    let labels: Vec<&str> = items.as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap()).collect();
    assert!(
        labels.contains(&"dp") && labels.contains(&"tp") && !labels.contains(&"seq_len"),
        "fields of `cluster`: {labels:?}"
    );

    let messy = fixed.replace("pp = 8;", "pp=8 ;");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 4}, "contentChanges": [{"text": messy}]}),
    );
    let _ = c.published().1;
    let edits = c.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": uri}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    assert_eq!(edits[0]["newText"].as_str().unwrap(), mpipe::fmt::format(&messy).unwrap());

    c.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A plan that checks but whose ranks need more memory than the device has: W0003 comes
/// from the simulation, so only a build reports it.
const OVER_MEMORY: &str = "use std::hardware::h100_sxm;
use std::models::llama3_70b;

model lm {
    llm = llama3_70b;
}

cluster {
    hardware = h100_sxm;
    devices = 2;
    pp = 2;
}

batch {
    microbatches = 8;
    seq_len = 4096;
}

cut llm;
schedule 1f1b;
";

/// What a build of [`OVER_MEMORY`] reports: its two ranks over memory, in one warning.
const BUILT: [&str; 1] = ["W0003"];

#[test]
fn a_change_gets_its_check_at_once_and_its_build_after_a_pause() {
    let (mut c, uri, dir) = open("pause", json!(null), OVER_MEMORY);
    assert_eq!(c.published(), (1, vec![]), "opening checks first");
    let (version, diags) = c.published();
    assert_eq!((version, codes(&diags)), (1, BUILT.to_vec()), "then builds the file as opened");

    c.change(&uri, 2, &OVER_MEMORY.replace("microbatches = 8", "microbatches = 16"));
    assert_eq!(c.published(), (2, vec![]), "a change gets the check alone");
    let (version, diags) = c.published();
    assert_eq!((version, codes(&diags)), (2, BUILT.to_vec()), "and the build once typing pauses");

    c.change(&uri, 3, &OVER_MEMORY.replace("1f1b", "1fb1"));
    let (version, diags) = c.published();
    assert_eq!((version, codes(&diags)), (3, vec!["E0306"]));
    c.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_save_builds_without_waiting_for_the_pause() {
    let (mut c, uri, dir) = open("save", json!({"diagnosticsDelayMs": 600_000}), OVER_MEMORY);
    assert_eq!(c.published(), (1, vec![]));
    assert_eq!(codes(&c.published().1), BUILT);

    c.change(&uri, 2, &OVER_MEMORY.replace("microbatches = 8", "microbatches = 16"));
    assert_eq!(c.published(), (2, vec![]));
    let early = c.incoming.recv_timeout(Duration::from_millis(500));
    assert!(early.is_err(), "nothing is built while the pause lasts: {early:?}");
    c.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}}));
    let (version, diags) = c.published();
    assert_eq!((version, codes(&diags)), (2, BUILT.to_vec()), "the ten-minute pause cannot have passed");
    c.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_change_during_the_pause_cancels_the_build_of_the_text_it_replaces() {
    let (mut c, uri, dir) = open("cancel", json!({"diagnosticsDelayMs": 1000}), OVER_MEMORY);
    assert_eq!(c.published(), (1, vec![]));
    assert_eq!(codes(&c.published().1), BUILT);

    c.change(&uri, 2, &OVER_MEMORY.replace("microbatches = 8", "microbatches = 16"));
    c.change(&uri, 3, &OVER_MEMORY.replace("microbatches = 8", "microbatches = 32"));
    assert_eq!(c.published(), (2, vec![]));
    assert_eq!(c.published(), (3, vec![]));
    let (version, diags) = c.published();
    assert_eq!((version, codes(&diags)), (3, BUILT.to_vec()), "version 2 was replaced before its pause ended");
    c.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hover on a part reads the last finished build (it never builds): with the build put off,
/// it has the part as declared; once a save has built the file, also where the part went.
#[test]
fn a_part_hover_shows_the_last_finished_build() {
    let (mut c, uri, dir) = open("placed", json!({"diagnosticsDelayMs": 600_000}), OVER_MEMORY);
    assert_eq!(c.published(), (1, vec![]));
    assert_eq!(codes(&c.published().1), BUILT);
    c.change(&uri, 2, &OVER_MEMORY.replace("pp = 2", "pp = 1").replace("devices = 2", "devices = 1"));
    assert_eq!(c.published(), (2, vec![]));
    let hover = |c: &mut Client| {
        let at = json!({"textDocument": {"uri": uri}, "position": {"line": 18, "character": 4}});
        c.request("textDocument/hover", at)["contents"]["value"].as_str().unwrap().to_string()
    };
    let before = hover(&mut c);
    assert!(before.starts_with("**llm** = `llama3_70b` — 80 layers"), "{before}");
    assert!(before.contains("stage 1 on rank 1"), "the build of version 1 placed two stages: {before}");
    c.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}}));
    assert_eq!(c.published().0, 2);
    let after = hover(&mut c);
    assert!(after.contains("stage 0 on rank 0") && !after.contains("rank 1"), "{after}");
    c.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}
