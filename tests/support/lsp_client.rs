//! A language client for `mpipec lsp` over stdio, as an editor drives it: shared by the
//! server's tests and by the benchmark of how fast it answers a change.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

pub struct Client {
    pub child: Child,
    stdin: ChildStdin,
    pub incoming: Receiver<Value>,
    next_id: i64,
}

impl Client {
    pub fn start(cache: &std::path::Path) -> Client {
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

    pub fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and waits for its response, passing over notifications.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
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

    /// The next diagnostics published: the document version they are for, and the list.
    pub fn published(&mut self) -> (i64, Vec<Value>) {
        loop {
            let m = self.incoming.recv_timeout(Duration::from_secs(30)).expect("diagnostics are published");
            if m["method"] == "textDocument/publishDiagnostics" {
                let version = m["params"]["version"].as_i64().expect("diagnostics name their version");
                return (version, m["params"]["diagnostics"].as_array().unwrap().clone());
            }
        }
    }

    /// Initializes the server with these `initializationOptions`; returns its capabilities.
    pub fn initialize(&mut self, options: Value) -> Value {
        let init = self.request(
            "initialize",
            json!({"processId": null, "rootUri": null, "capabilities": {}, "initializationOptions": options}),
        );
        self.notify("initialized", json!({}));
        init["capabilities"].clone()
    }

    pub fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "mpipe", "version": 1, "text": text}}),
        );
    }

    pub fn change(&mut self, uri: &str, version: i64, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
        );
    }

    pub fn stop(mut self) {
        assert!(self.request("shutdown", json!(null)).is_null());
        self.notify("exit", json!(null));
        assert!(self.child.wait().unwrap().success());
    }
}
