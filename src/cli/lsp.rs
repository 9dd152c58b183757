//! `mpipec lsp`: a language server over stdio (rust-analyzer's `lsp-server`). Parse and check
//! diagnostics on open and on every change; the build's (derive, simulation, targets) on open,
//! on save and when typing pauses, on a thread of their own so a change is never kept waiting
//! behind them. Hover, go to definition (into the standard library too), completion and
//! formatting, all from the compiler core (`mpipe::ide`, `mpipe::fmt`). Positions are UTF-16,
//! as LSP says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lsp_server::{Connection, Message, Notification, Request, Response};
use lsp_types as lsp;
use mpipe::diagnostics::{Diagnostic, Severity};
use mpipe::driver::Compiled;
use mpipe::ide::Placements;
use mpipe::ide::diagnostics::{self as ide_diagnostics, Depth};
use mpipe::resolve::loader::{Loader, ResolveError, Resolved};
use mpipe::span::{FileId, SourceFile, Span};

use super::loader::FsLoader;

/// How long typing must pause before the build diagnostics run, unless the editor asks for
/// another delay with `initializationOptions.diagnosticsDelayMs`.
const BUILD_DELAY: Duration = Duration::from_millis(300);

/// What the last finished build of each open document placed where, by path: written by the
/// build thread, read by hover.
type Placed = Arc<Mutex<BTreeMap<String, Arc<Placements>>>>;

#[derive(Clone)]
struct Server {
    /// Open documents by file path, with their text.
    docs: BTreeMap<String, String>,
    /// The last check of each open document, made when its text came: what hover, go to
    /// definition and completion read, so no request parses, checks or builds.
    checked: BTreeMap<String, Arc<Compiled>>,
    placed: Placed,
    /// Where the standard library is written for go-to-definition.
    stdlib_dir: PathBuf,
}

/// Files from disk, except those open in the editor: their unsaved text wins.
struct Overlay<'a> {
    fs: FsLoader,
    docs: &'a BTreeMap<String, String>,
}

impl Loader for Overlay<'_> {
    fn resolve(&self, from: &str, relative: &str) -> Result<Resolved, ResolveError> {
        self.fs.resolve(from, relative)
    }

    fn read(&self, key: &str) -> Result<Vec<u8>, String> {
        match self.docs.get(key) {
            Some(text) => Ok(text.clone().into_bytes()),
            None => self.fs.read(key),
        }
    }
}

fn path_of(uri: &lsp::Uri) -> String {
    let raw = uri.path().as_str();
    let mut out = Vec::with_capacity(raw.len());
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&raw[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn uri_of(path: &str) -> Option<lsp::Uri> {
    let encoded: String = path.chars().map(|c| if c == ' ' { "%20".to_string() } else { c.to_string() }).collect();
    format!("file://{encoded}").parse().ok()
}

fn position(file: &SourceFile, offset: usize) -> lsp::Position {
    let (line, character) = file.line_col_utf16(offset);
    lsp::Position { line: line as u32, character: character as u32 }
}

fn range(file: &SourceFile, span: Span) -> lsp::Range {
    lsp::Range { start: position(file, span.start as usize), end: position(file, span.end as usize) }
}

impl Server {
    fn check(&self, path: &str) -> Option<Compiled> {
        let text = self.docs.get(path)?;
        let (fs, key) = FsLoader::for_plan(Path::new(path), false).ok()?;
        let mut docs = self.docs.clone();
        docs.insert(key.clone(), text.clone());
        let loader = Overlay { fs, docs: &docs };
        Some(mpipe::driver::compile(&key, path, text.clone().into_bytes(), &loader))
    }

    /// The file a span lives in, as a path an editor can open (the stdlib is written out).
    fn file_path(&self, checked: &Compiled, file: FileId) -> Option<String> {
        let name = &checked.program.sources.get(file).name;
        if let Some(rest) = name.strip_prefix("<std>/") {
            std::fs::create_dir_all(&self.stdlib_dir).ok()?;
            let path = self.stdlib_dir.join(rest);
            if !path.exists() {
                std::fs::write(&path, &checked.program.sources.get(file).text).ok()?;
            }
            return Some(path.to_string_lossy().into_owned());
        }
        let module = checked.program.module_of_file(file)?;
        Some(checked.program.modules[module].key.clone())
    }

    /// The diagnostics of the open file `path`, checked as `checked`, at `depth`; `None` when
    /// `wanted` stopped the build part-way. A build that placed the plan leaves what it placed
    /// for hover.
    fn diagnostics(
        &self,
        path: &str,
        checked: &Compiled,
        depth: Depth,
        wanted: &dyn Fn() -> bool,
    ) -> Option<Vec<lsp::Diagnostic>> {
        let mut placed = |placements| {
            if let Ok(mut p) = self.placed.lock() {
                p.insert(path.to_string(), Arc::new(placements));
            }
        };
        let all = ide_diagnostics::diagnostics(checked, depth, wanted, &mut placed)?;
        Some(all.iter().map(|d| self.to_lsp(checked, d)).collect())
    }

    fn to_lsp(&self, checked: &Compiled, d: &Diagnostic) -> lsp::Diagnostic {
        let sources = &checked.program.sources;
        let primary = d.position();
        let r = primary.map(|s| range(sources.get(s.file), s)).unwrap_or_default();
        let mut message = d.message.clone();
        if let Some(label) = d.labels.iter().find(|l| l.primary).filter(|l| !l.message.is_empty()) {
            message.push_str(&format!(": {}", label.message));
        }
        for n in &d.notes {
            message.push_str(&format!("\nnote: {n}"));
        }
        if let Some(h) = &d.help {
            message.push_str(&format!("\nhelp: {h}"));
        }
        let related: Vec<lsp::DiagnosticRelatedInformation> = d
            .labels
            .iter()
            .filter(|l| !l.primary)
            .filter_map(|l| {
                let uri = uri_of(&self.file_path(checked, l.span.file)?)?;
                Some(lsp::DiagnosticRelatedInformation {
                    location: lsp::Location { uri, range: range(sources.get(l.span.file), l.span) },
                    message: l.message.clone(),
                })
            })
            .collect();
        lsp::Diagnostic {
            range: r,
            severity: Some(if d.severity == Severity::Error {
                lsp::DiagnosticSeverity::ERROR
            } else {
                lsp::DiagnosticSeverity::WARNING
            }),
            code: Some(lsp::NumberOrString::String(d.code.as_str().to_string())),
            source: Some("mpipec".into()),
            message,
            related_information: (!related.is_empty()).then_some(related),
            ..Default::default()
        }
    }

    /// The document's last check and the byte offset of an LSP position in it.
    fn at(&self, uri: &lsp::Uri, pos: lsp::Position) -> Option<(Arc<Compiled>, FileId, usize)> {
        let checked = self.checked.get(&path_of(uri))?.clone();
        let file = checked.program.root().file;
        let offset = checked.program.sources.get(file).offset_of_utf16(pos.line as usize, pos.character as usize);
        Some((checked, file, offset))
    }

    fn request(&self, req: &Request) -> serde_json::Value {
        let null = serde_json::Value::Null;
        match req.method.as_str() {
            "textDocument/hover" => {
                let Ok(p) = serde_json::from_value::<lsp::HoverParams>(req.params.clone()) else { return null };
                let d = p.text_document_position_params;
                let Some((checked, file, offset)) = self.at(&d.text_document.uri, d.position) else { return null };
                let placed = self.placed.lock().ok().and_then(|p| p.get(&path_of(&d.text_document.uri)).cloned());
                let Some((span, text)) = mpipe::ide::hover(&checked, placed.as_deref(), file, offset) else {
                    return null;
                };
                let hover = lsp::Hover {
                    contents: lsp::HoverContents::Markup(lsp::MarkupContent {
                        kind: lsp::MarkupKind::Markdown,
                        value: text,
                    }),
                    range: Some(range(checked.program.sources.get(file), span)),
                };
                serde_json::to_value(hover).unwrap_or(null)
            }
            "textDocument/definition" => {
                let Ok(p) = serde_json::from_value::<lsp::GotoDefinitionParams>(req.params.clone()) else {
                    return null;
                };
                let d = p.text_document_position_params;
                let Some((checked, file, offset)) = self.at(&d.text_document.uri, d.position) else { return null };
                let Some(span) = mpipe::ide::definition(&checked, file, offset) else { return null };
                let Some(uri) = self.file_path(&checked, span.file).and_then(|p| uri_of(&p)) else { return null };
                let location = lsp::Location { uri, range: range(checked.program.sources.get(span.file), span) };
                serde_json::to_value(lsp::GotoDefinitionResponse::Scalar(location)).unwrap_or(null)
            }
            "textDocument/completion" => {
                let Ok(p) = serde_json::from_value::<lsp::CompletionParams>(req.params.clone()) else { return null };
                let d = p.text_document_position;
                let path = path_of(&d.text_document.uri);
                let Some(text) = self.docs.get(&path) else { return null };
                let checked = self.checked.get(&path).map(Arc::as_ref);
                let source = SourceFile::new(path.clone(), text.clone());
                let offset = source.offset_of_utf16(d.position.line as usize, d.position.character as usize);
                let file = checked.as_ref().map_or(FileId(0), |c| c.program.root().file);
                let items: Vec<lsp::CompletionItem> = mpipe::ide::completions(checked, file, text, offset)
                    .into_iter()
                    .map(|c| lsp::CompletionItem {
                        label: c.label,
                        kind: Some(match c.kind {
                            mpipe::ide::CompletionKind::Keyword => lsp::CompletionItemKind::KEYWORD,
                            mpipe::ide::CompletionKind::Skeleton => lsp::CompletionItemKind::FUNCTION,
                            mpipe::ide::CompletionKind::Owner => lsp::CompletionItemKind::ENUM_MEMBER,
                            mpipe::ide::CompletionKind::Field => lsp::CompletionItemKind::FIELD,
                            mpipe::ide::CompletionKind::Name => lsp::CompletionItemKind::REFERENCE,
                            mpipe::ide::CompletionKind::Module => lsp::CompletionItemKind::MODULE,
                        }),
                        detail: Some(c.detail),
                        ..Default::default()
                    })
                    .collect();
                serde_json::to_value(lsp::CompletionResponse::Array(items)).unwrap_or(null)
            }
            "textDocument/formatting" => {
                let Ok(p) = serde_json::from_value::<lsp::DocumentFormattingParams>(req.params.clone()) else {
                    return null;
                };
                let path = path_of(&p.text_document.uri);
                let Some(text) = self.docs.get(&path) else { return null };
                let Ok(formatted) = mpipe::fmt::format(text) else { return null };
                let source = SourceFile::new(path, text.clone());
                let edit = lsp::TextEdit {
                    range: lsp::Range { start: lsp::Position::default(), end: position(&source, text.len()) },
                    new_text: formatted,
                };
                serde_json::to_value(vec![edit]).unwrap_or(null)
            }
            _ => null,
        }
    }
}

/// Sends a message to the client, from the main thread or the build thread.
type Outbox = Arc<dyn Fn(Message) + Send + Sync>;

fn publish(outbox: &Outbox, uri: &lsp::Uri, version: i32, diagnostics: Vec<lsp::Diagnostic>) {
    let params = lsp::PublishDiagnosticsParams { uri: uri.clone(), diagnostics, version: Some(version) };
    outbox(Message::Notification(Notification::new("textDocument/publishDiagnostics".into(), params)));
}

/// The version of each open document, shared with the build thread: a build publishes only
/// while its version is still the document's, checked and sent under the lock, so a change
/// (which takes the lock to set its version) always drops the older build's answer.
type Versions = Arc<Mutex<BTreeMap<String, i32>>>;

/// A build of one document as it was at `version`, over a copy of the open documents.
struct Job {
    uri: lsp::Uri,
    version: i32,
    server: Server,
}

/// The build thread. Jobs queued while it was busy are skipped for the newest of each document.
fn builder(outbox: Outbox, versions: Versions) -> (mpsc::Sender<Job>, JoinHandle<()>) {
    let (jobs, queue) = mpsc::channel::<Job>();
    let thread = std::thread::spawn(move || {
        while let Ok(job) = queue.recv() {
            let mut newest = BTreeMap::from([(path_of(&job.uri), job)]);
            newest.extend(queue.try_iter().map(|j| (path_of(&j.uri), j)));
            for (path, job) in newest {
                let current = |versions: &BTreeMap<String, i32>| versions.get(&path) == Some(&job.version);
                let wanted = || versions.lock().is_ok_and(|v| current(&v));
                let Some(checked) = job.server.check(&path) else { continue };
                let Some(diagnostics) = job.server.diagnostics(&path, &checked, Depth::Build, &wanted) else {
                    continue;
                };
                if let Ok(v) = versions.lock()
                    && current(&v)
                {
                    publish(&outbox, &job.uri, job.version, diagnostics);
                }
            }
        }
    });
    (jobs, thread)
}

/// The documents, their versions, and the builds waiting for typing to pause.
struct Session {
    server: Server,
    versions: Versions,
    /// Per document path: when its build is due, and its URI.
    due: BTreeMap<String, (Instant, lsp::Uri)>,
    delay: Duration,
    outbox: Outbox,
    jobs: mpsc::Sender<Job>,
}

impl Session {
    /// A new text for a document: its check diagnostics now, its build after `after`.
    fn edited(&mut self, uri: &lsp::Uri, version: i32, text: String, after: Duration) {
        let path = path_of(uri);
        self.server.docs.insert(path.clone(), text);
        if let Ok(mut v) = self.versions.lock() {
            v.insert(path.clone(), version);
        }
        let Some(checked) = self.server.check(&path) else {
            self.server.checked.remove(&path);
            publish(&self.outbox, uri, version, Vec::new());
            return;
        };
        let diagnostics = self.server.diagnostics(&path, &checked, Depth::Check, &|| true).unwrap_or_default();
        publish(&self.outbox, uri, version, diagnostics);
        let builds = ide_diagnostics::builds(&checked);
        self.server.checked.insert(path.clone(), Arc::new(checked));
        if builds {
            self.due.insert(path, (Instant::now() + after, uri.clone()));
        } else {
            self.due.remove(&path);
        }
    }

    fn saved(&mut self, uri: &lsp::Uri) {
        let path = path_of(uri);
        if self.server.docs.contains_key(&path) {
            self.due.insert(path, (Instant::now(), uri.clone()));
        }
    }

    fn closed(&mut self, uri: &lsp::Uri) {
        let path = path_of(uri);
        self.server.docs.remove(&path);
        self.server.checked.remove(&path);
        if let Ok(mut p) = self.server.placed.lock() {
            p.remove(&path);
        }
        self.due.remove(&path);
        if let Ok(mut v) = self.versions.lock() {
            v.remove(&path);
        }
    }

    /// Hands every build that is due to the build thread.
    fn start_due(&mut self) {
        let now = Instant::now();
        let (ready, waiting) = std::mem::take(&mut self.due).into_iter().partition(|(_, (at, _))| *at <= now);
        self.due = waiting;
        let versions = self.versions.lock().map(|v| v.clone()).unwrap_or_default();
        for (path, (_, uri)) in ready {
            if let Some(&version) = versions.get(&path) {
                let _ = self.jobs.send(Job { uri, version, server: self.server.clone() });
            }
        }
    }

    fn notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "textDocument/didOpen" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidOpenTextDocumentParams>(n.params) {
                    let d = p.text_document;
                    self.edited(&d.uri, d.version, d.text, Duration::ZERO);
                }
            }
            "textDocument/didChange" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidChangeTextDocumentParams>(n.params)
                    && let Some(change) = p.content_changes.into_iter().last()
                {
                    let d = p.text_document;
                    self.edited(&d.uri, d.version, change.text, self.delay);
                }
            }
            "textDocument/didSave" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidSaveTextDocumentParams>(n.params) {
                    self.saved(&p.text_document.uri);
                }
            }
            "textDocument/didClose" => {
                if let Ok(p) = serde_json::from_value::<lsp::DidCloseTextDocumentParams>(n.params) {
                    self.closed(&p.text_document.uri);
                }
            }
            _ => {}
        }
    }

    /// The next message, or `None` when the client has gone; starts due builds while waiting.
    fn next(&mut self, connection: &Connection) -> Option<Message> {
        loop {
            let Some(at) = self.due.values().map(|(at, _)| *at).min() else { return connection.receiver.recv().ok() };
            match connection.receiver.recv_deadline(at) {
                Ok(message) => return Some(message),
                Err(e) if e.is_timeout() => self.start_due(),
                Err(_) => return None,
            }
        }
    }
}

fn capabilities() -> lsp::ServerCapabilities {
    lsp::ServerCapabilities {
        position_encoding: Some(lsp::PositionEncodingKind::UTF16),
        text_document_sync: Some(lsp::TextDocumentSyncCapability::Options(lsp::TextDocumentSyncOptions {
            open_close: Some(true),
            change: Some(lsp::TextDocumentSyncKind::FULL),
            save: Some(lsp::TextDocumentSyncSaveOptions::Supported(true)),
            ..Default::default()
        })),
        hover_provider: Some(lsp::HoverProviderCapability::Simple(true)),
        definition_provider: Some(lsp::OneOf::Left(true)),
        completion_provider: Some(lsp::CompletionOptions {
            trigger_characters: Some(vec![":".into(), " ".into()]),
            ..Default::default()
        }),
        document_formatting_provider: Some(lsp::OneOf::Left(true)),
        ..Default::default()
    }
}

/// The pause before a build, from the editor's `initializationOptions`.
fn delay(initialize: &serde_json::Value) -> Duration {
    initialize["initializationOptions"]["diagnosticsDelayMs"].as_u64().map_or(BUILD_DELAY, Duration::from_millis)
}

pub fn run() -> u8 {
    let (connection, io) = Connection::stdio();
    let caps = serde_json::to_value(capabilities()).expect("capabilities serialise");
    let Ok(initialize) = connection.initialize(caps) else { return super::EXIT_USAGE };
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let server = Server {
        docs: BTreeMap::new(),
        checked: BTreeMap::new(),
        placed: Placed::default(),
        stdlib_dir: cache.join("mpipec").join(format!("stdlib-{}", mpipe::VERSION)),
    };
    let sender = connection.sender.clone();
    let outbox: Outbox = Arc::new(move |m| {
        let _ = sender.send(m);
    });
    let versions = Versions::default();
    let (jobs, build_thread) = builder(outbox.clone(), versions.clone());
    let mut session = Session { server, versions, due: BTreeMap::new(), delay: delay(&initialize), outbox, jobs };
    while let Some(message) = session.next(&connection) {
        match message {
            Message::Request(req) => {
                if connection.handle_shutdown(&req).unwrap_or(true) {
                    break;
                }
                let result = session.server.request(&req);
                let _ = connection.sender.send(Message::Response(Response::new_ok(req.id, result)));
            }
            Message::Notification(n) => session.notification(n),
            Message::Response(_) => {}
        }
    }
    // The writer thread ends when the last sender is gone: the session's, the build thread's.
    drop(session);
    let _ = build_thread.join();
    drop(connection);
    let _ = io.join();
    0
}
