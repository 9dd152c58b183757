//! `mpipec lsp` over stdio, driven as an editor would: initialize, open a file with two errors,
//! fix one, hover, go to definition (into the standard library), complete, format, shut down.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

struct Client {
    child: Child,
    stdin: ChildStdin,
    incoming: Receiver<Value>,
    next_id: i64,
}

impl Client {
    fn start(cache: &std::path::Path) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mpipec"))
            .arg("lsp")
            .env("XDG_CACHE_HOME", cache)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, incoming) = channel();
        std::thread::spawn(move || {
            loop {
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(n) = line.strip_prefix("Content-Length: ") {
                        length = n.parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                stdout.read_exact(&mut body).unwrap();
                if tx.send(serde_json::from_slice(&body).unwrap()).is_err() {
                    return;
                }
            }
        });
        Client { child, stdin, incoming, next_id: 1 }
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and waits for its response, passing over notifications.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let m = self.incoming.recv_timeout(Duration::from_secs(30)).expect("the server answers");
            if m["id"] == id {
                return m["result"].clone();
            }
        }
    }

    fn diagnostics(&mut self) -> Vec<Value> {
        loop {
            let m = self.incoming.recv_timeout(Duration::from_secs(30)).expect("diagnostics are published");
            if m["method"] == "textDocument/publishDiagnostics" {
                return m["params"]["diagnostics"].as_array().unwrap().clone();
            }
        }
    }
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
    let dir = std::env::temp_dir().join(format!("mpipec-lsp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plan.mpipe");
    std::fs::write(&path, PLAN).unwrap();
    let uri = format!("file://{}", path.display());
    let mut c = Client::start(&dir.join("cache"));

    let init = c.request("initialize", json!({"processId": null, "rootUri": null, "capabilities": {}}));
    assert_eq!(init["capabilities"]["hoverProvider"], true);
    assert_eq!(init["capabilities"]["positionEncoding"], "utf-16");
    c.notify("initialized", json!({}));

    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "mpipe", "version": 1, "text": PLAN}}),
    );
    let diags = c.diagnostics();
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
    let diags = c.diagnostics();
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
    let _ = c.diagnostics();
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
    let _ = c.diagnostics();
    let edits = c.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": uri}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    assert_eq!(edits[0]["newText"].as_str().unwrap(), mpipe::fmt::format(&messy).unwrap());

    let shutdown = c.request("shutdown", json!(null));
    assert!(shutdown.is_null());
    c.notify("exit", json!(null));
    let status = c.child.wait().unwrap();
    assert!(status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
