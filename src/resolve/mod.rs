//! Loading a plan and everything it imports, and binding names: which definition each name
//! in each file stands for. Cycles, missing files and missing names are diagnostics.

pub mod loader;
pub mod stdlib;

use std::collections::BTreeMap;

use crate::ast::{self, DefKind, Item, UseSource};
use crate::error::{Error, ImportError, InputError};
use crate::parse;
use crate::span::{FileId, SourceMap, Span};
use crate::suggest::did_you_mean;
use loader::{Loader, ResolveError};

/// A definition somewhere in the program: module index and item index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DefId {
    pub module: usize,
    pub item: usize,
}

#[derive(Clone, Debug)]
pub struct ModuleInfo {
    pub file: FileId,
    pub key: String,
    /// `None` when the file did not parse; names imported from it are not reported again.
    pub ast: Option<ast::Module>,
    /// Name -> definition, for every name visible in this module (own and imported).
    pub scope: BTreeMap<String, Binding>,
    /// Names a `use` of this module lists but could not bind (its error is reported there),
    /// so their uses are not reported again as unknown names.
    pub unresolved: std::collections::BTreeSet<String>,
}

#[derive(Clone, Debug)]
pub struct Binding {
    pub def: DefId,
    /// The `use` that brought the name in; `None` for the module's own definitions.
    pub import: Option<Span>,
}

#[derive(Clone, Debug, Default)]
pub struct Program {
    pub sources: SourceMap,
    pub modules: Vec<ModuleInfo>,
}

impl Program {
    pub fn root(&self) -> &ModuleInfo {
        &self.modules[0]
    }

    pub fn definition(&self, id: DefId) -> &ast::Definition {
        match &self.modules[id.module].ast.as_ref().expect("bound modules parsed").items[id.item] {
            Item::Definition(d) => d,
            _ => unreachable!("DefId points at a definition"),
        }
    }

    /// Looks a name up in the scope of `module`.
    pub fn lookup(&self, module: usize, name: &str) -> Option<&Binding> {
        self.modules[module].scope.get(name)
    }

    pub fn module_of_file(&self, file: FileId) -> Option<usize> {
        self.modules.iter().position(|m| m.file == file)
    }
}

/// Loads the plan `root` (named `display` in diagnostics) and its imports.
pub fn load(root_key: &str, display: &str, bytes: Vec<u8>, loader: &dyn Loader) -> (Program, Vec<Error>) {
    let mut state = State { program: Program::default(), errors: Vec::new(), stack: Vec::new(), loader };
    state.load_module(root_key.to_string(), display.to_string(), bytes);
    state.bind();
    (state.program, state.errors)
}

struct State<'a> {
    program: Program,
    errors: Vec<Error>,
    /// Keys of the modules being loaded, outermost first: a key seen here again is a cycle.
    stack: Vec<String>,
    loader: &'a dyn Loader,
}

impl State<'_> {
    fn load_module(&mut self, key: String, display: String, bytes: Vec<u8>) -> usize {
        let (text, bad_utf8) = match String::from_utf8(bytes) {
            Ok(text) => (text, None),
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(valid))
            }
        };
        let file = self.program.sources.add(display, text);
        let index = self.program.modules.len();
        self.program.modules.push(ModuleInfo {
            file,
            key: key.clone(),
            ast: None,
            scope: BTreeMap::new(),
            unresolved: Default::default(),
        });
        if let Some(offset) = bad_utf8 {
            // The lossy text holds U+FFFD, three bytes, where the bad byte was.
            self.errors.push(Error::Input(InputError::NotUtf8 {
                span: Span::new(file, offset, offset + '\u{FFFD}'.len_utf8()),
            }));
            return index;
        }
        let module = match parse::parse(file, &self.program.sources.get(file).text) {
            Ok(m) => m,
            Err(e) => {
                self.errors.push(e);
                return index;
            }
        };
        self.stack.push(key.clone());
        for item in &module.items {
            if let Item::Use(u) = item {
                self.import(&key, u);
            }
        }
        self.stack.pop();
        self.program.modules[index].ast = Some(module);
        index
    }

    /// Makes sure the module a `use` names is loaded.
    fn import(&mut self, from: &str, u: &ast::UseDecl) {
        let span = u.source.span();
        let (key, display, bytes) = match &u.source {
            UseSource::Path(path) => {
                let name = path.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join("::");
                let Some((display, text)) = stdlib::module(&name) else {
                    let suggestion = did_you_mean(&name, stdlib::module_names());
                    self.errors.push(Error::Import(ImportError::ModuleNotFound { span, path: name, suggestion }));
                    return;
                };
                (name, display.to_string(), text.as_bytes().to_vec())
            }
            UseSource::File(path) => match self.loader.resolve(from, &path.value) {
                Ok(r) => {
                    if self.find(&r.key).is_some() || self.stack.contains(&r.key) {
                        (r.key, r.display, Vec::new())
                    } else {
                        match self.loader.read(&r.key) {
                            Ok(bytes) => (r.key, r.display, bytes),
                            Err(reason) => {
                                self.errors.push(Error::Import(ImportError::FileNotFound {
                                    span,
                                    path: path.value.clone(),
                                    reason,
                                }));
                                return;
                            }
                        }
                    }
                }
                Err(ResolveError::NotFound(reason)) => {
                    self.errors.push(Error::Import(ImportError::FileNotFound {
                        span,
                        path: path.value.clone(),
                        reason,
                    }));
                    return;
                }
                Err(ResolveError::OutsideRoot) => {
                    self.errors.push(Error::Import(ImportError::ImportOutsideRoot { span, path: path.value.clone() }));
                    return;
                }
            },
        };
        if let Some(pos) = self.stack.iter().position(|k| *k == key) {
            let mut chain: Vec<String> = self.stack[pos..].iter().map(|k| self.display_of(k)).collect();
            chain.push(self.display_of(&key));
            self.errors.push(Error::Import(ImportError::ImportCycle { span, chain }));
            return;
        }
        if self.find(&key).is_none() {
            self.load_module(key, display, bytes);
        }
    }

    fn find(&self, key: &str) -> Option<usize> {
        self.program.modules.iter().position(|m| m.key == key)
    }

    fn display_of(&self, key: &str) -> String {
        match self.find(key) {
            Some(i) => self.program.sources.get(self.program.modules[i].file).name.clone(),
            None => key.to_string(),
        }
    }

    /// Fills every module's scope: its own definitions, then the names it imports.
    fn bind(&mut self) {
        for m in 0..self.program.modules.len() {
            let Some(ast) = &self.program.modules[m].ast else {
                continue;
            };
            let mut scope: BTreeMap<String, Binding> = BTreeMap::new();
            for (i, item) in ast.items.iter().enumerate() {
                if let Item::Definition(d) = item {
                    if let Some(prev) = scope.get(&d.name.name) {
                        let first = self.program.definition(prev.def).name.span;
                        self.errors.push(Error::Import(ImportError::DuplicateDefinition {
                            span: d.name.span,
                            name: d.name.name.clone(),
                            first,
                        }));
                    } else {
                        scope.insert(d.name.name.clone(), Binding { def: DefId { module: m, item: i }, import: None });
                    }
                }
            }
            self.program.modules[m].scope = scope;
        }
        for m in 0..self.program.modules.len() {
            let Some(ast) = self.program.modules[m].ast.clone() else {
                continue;
            };
            for item in &ast.items {
                let Item::Use(u) = item else { continue };
                let Some(target) = self.target_of(m, u) else {
                    self.program.modules[m].unresolved.extend(u.items.iter().map(|i| i.name.clone()));
                    continue;
                };
                for name in &u.items {
                    if !self.bind_import(m, target, name) {
                        self.program.modules[m].unresolved.insert(name.name.clone());
                    }
                }
            }
        }
    }

    /// Binds one imported name; false when it could not be.
    fn bind_import(&mut self, m: usize, target: usize, name: &ast::Ident) -> bool {
        let target_info = &self.program.modules[target];
        if target_info.ast.is_none() {
            return false;
        }
        let own = |b: &&Binding| b.import.is_none();
        let Some(binding) = target_info.scope.get(&name.name).filter(own) else {
            let module = self.program.sources.get(target_info.file).name.clone();
            let module = if target_info.key.starts_with("std::") { target_info.key.clone() } else { module };
            let candidates = target_info.scope.iter().filter(|(_, b)| b.import.is_none()).map(|(n, _)| n.as_str());
            let suggestion = did_you_mean(&name.name, candidates);
            self.errors.push(Error::Import(ImportError::ItemNotInModule {
                span: name.span,
                item: name.name.clone(),
                module,
                suggestion,
            }));
            return false;
        };
        let def = binding.def;
        if let Some(prev) = self.program.modules[m].scope.get(&name.name) {
            if prev.def != def {
                let first = prev.import.unwrap_or_else(|| self.program.definition(prev.def).name.span);
                self.errors.push(Error::Import(ImportError::DuplicateDefinition {
                    span: name.span,
                    name: name.name.clone(),
                    first,
                }));
            }
            return true;
        }
        self.program.modules[m].scope.insert(name.name.clone(), Binding { def, import: Some(name.span) });
        true
    }

    /// The module a `use` in module `m` refers to, if it was loaded.
    fn target_of(&self, m: usize, u: &ast::UseDecl) -> Option<usize> {
        match &u.source {
            UseSource::Path(path) => {
                let name = path.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join("::");
                self.find(&name)
            }
            UseSource::File(path) => {
                let from = &self.program.modules[m].key;
                let key = self.loader.resolve(from, &path.value).ok()?.key;
                self.find(&key)
            }
        }
    }
}

/// Which kinds of definition a name may stand for where it is used.
pub fn kind_word(kinds: &[DefKind]) -> &'static str {
    match kinds {
        [DefKind::Hardware] => "hardware",
        [DefKind::Encoder, DefKind::Decoder] | [DefKind::Decoder, DefKind::Encoder] => "architecture",
        [DefKind::Encoder] => "encoder",
        [DefKind::Decoder] => "decoder",
        _ => "definition",
    }
}
