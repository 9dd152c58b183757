//! The syntax tree of one .mpipe file, exactly as written. Every node carries its byte span;
//! nothing here is resolved or checked (that is `check`'s job).

use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub items: Vec<Item>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Use(UseDecl),
    Definition(Definition),
    Section(Section),
    Cut(CutStmt),
    Schedule(ScheduleStmt),
    Owner(OwnerStmt),
    Target(TargetStmt),
}

impl Item {
    pub fn span(&self) -> Span {
        match self {
            Item::Use(u) => u.span,
            Item::Definition(d) => d.span,
            Item::Section(s) => s.span,
            Item::Cut(c) => c.span,
            Item::Schedule(s) => s.span,
            Item::Owner(o) => o.span,
            Item::Target(t) => t.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct UseDecl {
    pub source: UseSource,
    pub items: Vec<Ident>,
    /// `{a, b}` rather than a single name; kept so `fmt` prints what was meant.
    pub grouped: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum UseSource {
    /// `std::hardware` — a module path; the first segment names the library.
    Path(Vec<Ident>),
    /// `"parts.mpipe"` — a file relative to the importing file.
    File(StringLit),
}

impl UseSource {
    pub fn span(&self) -> Span {
        match self {
            UseSource::Path(p) => p[0].span.to(p[p.len() - 1].span),
            UseSource::File(s) => s.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct StringLit {
    pub value: String,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DefKind {
    Hardware,
    Encoder,
    Decoder,
    Model,
}

impl DefKind {
    pub fn keyword(self) -> &'static str {
        match self {
            DefKind::Hardware => "hardware",
            DefKind::Encoder => "encoder",
            DefKind::Decoder => "decoder",
            DefKind::Model => "model",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Definition {
    pub kind: DefKind,
    pub name: Ident,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SectionKind {
    Cluster,
    Batch,
}

impl SectionKind {
    pub fn keyword(self) -> &'static str {
        match self {
            SectionKind::Cluster => "cluster",
            SectionKind::Batch => "batch",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    pub kind: SectionKind,
    pub keyword_span: Span,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub entries: Vec<Entry>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Field(Field),
    Block(SubBlock),
}

impl Entry {
    pub fn key(&self) -> &Ident {
        match self {
            Entry::Field(f) => &f.key,
            Entry::Block(b) => &b.key,
        }
    }

    pub fn span(&self) -> Span {
        match self {
            Entry::Field(f) => f.span,
            Entry::Block(b) => b.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub key: Ident,
    pub value: Value,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SubBlock {
    pub key: Ident,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub kind: ValueKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    Number(Quantity),
    String(String),
    Bool(bool),
    Name(Ident),
    List(Vec<Value>),
    /// `qwen_vit { frozen = true; }` — a definition used with attributes.
    Instance {
        base: Ident,
        body: Block,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Quantity {
    pub value: f64,
    /// The digits as written (`1.6`, `151_936`), so `fmt` never reprints a number differently.
    pub digits: String,
    pub unit: Option<Ident>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CutStmt {
    pub regions: Vec<RegionExpr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RegionExpr {
    pub segments: Vec<Segment>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub part: Ident,
    pub range: Option<LayerRange>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayerRange {
    pub start: u64,
    pub end: u64,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleStmt {
    pub skeletons: Vec<SkeletonExpr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SkeletonExpr {
    pub name: Ident,
    /// `None` without parentheses; `Some(vec![])` for `name()`.
    pub args: Option<Vec<Arg>>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Value,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OwnerStmt {
    pub spec: Value,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TargetStmt {
    pub targets: Vec<Target>,
    pub span: Span,
}

/// `megatron` or `megatron(nearest)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub name: Ident,
    pub option: Option<Ident>,
    pub span: Span,
}
