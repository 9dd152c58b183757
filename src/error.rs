//! Every error and warning mpipec reports, as data. [`Error::to_diagnostic`] is the one
//! place where they become [`Diagnostic`]s: message, labels, help and code are decided here.
//! A variant carries the limits and the lists its message quotes, so this module sits under
//! the passes that report through it and imports nothing from them.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;
use crate::units::Dimension;

#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    // ---- input and syntax ----
    Syntax {
        span: Span,
        expected: Vec<&'static str>,
        found: String,
        unclosed: Option<Span>,
    },
    /// A statement's `;` missing at the end of its line; `span` is empty, where it goes.
    MissingSemicolon {
        span: Span,
    },
    NotUtf8 {
        span: Span,
    },
    NestingTooDeep {
        span: Span,
        limit: usize,
    },
    FileTooLarge {
        span: Span,
        bytes: usize,
        limit: usize,
    },

    // ---- imports and names ----
    ModuleNotFound {
        span: Span,
        path: String,
        suggestion: Option<String>,
    },
    FileNotFound {
        span: Span,
        path: String,
        reason: String,
    },
    ImportCycle {
        span: Span,
        chain: Vec<String>,
    },
    ItemNotInModule {
        span: Span,
        item: String,
        module: String,
        suggestion: Option<String>,
    },
    UnknownName {
        span: Span,
        name: String,
        expected: &'static str,
        suggestion: Option<String>,
        /// The standard library's module and name: this name, or the closest one.
        import_from: Option<(String, String)>,
    },
    DuplicateDefinition {
        span: Span,
        name: String,
        first: Span,
    },
    ImportOutsideRoot {
        span: Span,
        path: String,
    },
    BadOverride {
        span: Span,
        key: String,
        /// The key forms `--set` knows, for the help.
        keys: &'static [&'static str],
    },
    PlanInLibrary {
        span: Span,
        what: &'static str,
    },

    // ---- fields, types and units ----
    WrongType {
        span: Span,
        expected: String,
        found: String,
        defined_at: Option<Span>,
    },
    UnknownField {
        span: Span,
        field: String,
        context: String,
        suggestion: Option<String>,
    },
    MissingField {
        span: Span,
        field: String,
        context: String,
        hint: String,
    },
    EmptyModel {
        span: Span,
        name: String,
    },
    DuplicateField {
        span: Span,
        field: String,
        first: Span,
    },
    UnitMismatch {
        span: Span,
        expected: Option<Dimension>,
        found: Option<Dimension>,
    },
    UnknownUnit {
        span: Span,
        unit: String,
        suggestion: Option<String>,
    },
    /// A count written with a suffix that is no unit (`8k`): said how to write it in full.
    CountSuffix {
        span: Span,
        written: String,
        /// The decimal and the binary reading, for a magnitude suffix (`k`, `M`, `Ki`, …).
        readings: Option<(u64, u64)>,
    },
    OutOfRange {
        span: Span,
        what: String,
        requirement: String,
    },
    MissingSection {
        span: Span,
        section: &'static str,
        example: &'static str,
    },
    DuplicateSection {
        span: Span,
        section: &'static str,
        first: Span,
    },
    InvalidChoice {
        span: Span,
        what: String,
        found: String,
        choices: Vec<&'static str>,
        suggestion: Option<String>,
    },

    // ---- the algebra ----
    UnknownPart {
        span: Span,
        name: String,
        model: Span,
        suggestion: Option<String>,
    },
    CutOutOfOrder {
        span: Span,
        previous: Span,
        detail: String,
    },
    CutIncomplete {
        span: Span,
        missing: String,
        /// The whole `cut …;` statement, and what it should say.
        fix: Option<(Span, String)>,
    },
    BadLayerRange {
        span: Span,
        part: String,
        layers: u64,
        detail: String,
    },
    ScheduleArity {
        span: Span,
        cut: Span,
        regions: usize,
        skeletons: usize,
    },
    UnknownSkeleton {
        span: Span,
        name: String,
        suggestion: Option<String>,
    },
    BadSkeletonArgument {
        span: Span,
        skeleton: String,
        message: String,
        help: String,
    },
    /// `chunks` below 1 or above the replicated region's layers (`layers`, once the cut is known).
    ChunksOutOfRange {
        span: Span,
        layers: Option<u64>,
    },
    LookaheadOutOfRange {
        span: Span,
    },
    LookaheadPrefix {
        span: Span,
        skeleton: Span,
    },
    LookaheadTrainable {
        span: Span,
        part: String,
        part_span: Span,
    },
    TransposeOnlyArgument {
        span: Span,
        name: String,
        skeleton: String,
    },
    DeviceProduct {
        span: Span,
        devices: u64,
        pp: u64,
        dp: u64,
        tp: u64,
    },
    MicrobatchesIncompatible {
        span: Span,
        skeleton: Span,
        message: String,
        help: String,
    },
    OwnerWithoutReplicated {
        span: Span,
    },
    BadOwner {
        span: Span,
        message: String,
        label: String,
        help: String,
    },
    AdjacentReplicated {
        first: Span,
        second: Span,
        merged: String,
        /// One edit over the cut and the schedule, where both are in one source.
        fix: Option<(Span, String)>,
    },
    ReplicatedWithoutSharded {
        span: Span,
    },
    TooFewLayers {
        span: Span,
        region: String,
        layers: u64,
        stages: u64,
    },
    BadSplit {
        span: Span,
        message: String,
        help: String,
    },
    UnsupportedArrangement {
        span: Span,
        message: String,
        label: String,
        help: String,
    },
    TooLarge {
        span: Span,
        events: u64,
        limit: u64,
    },
    UnknownTarget {
        span: Span,
        name: String,
        suggestion: Option<String>,
        targets: &'static [&'static str],
    },

    // ---- backends ----
    /// A skeleton or placement the target has no native form of, without `nearest`.
    NotNative {
        span: Span,
        target: Option<Span>,
        name: &'static str,
        changes: Vec<String>,
    },
    /// The target cannot run the plan, not even its nearest native equivalent.
    TargetCannotRun {
        span: Span,
        target: Option<Span>,
        name: &'static str,
        reason: String,
        help: String,
    },
    /// With `nearest`: the nearest native plan is what the target gets.
    NearestEmitted {
        span: Span,
        target: Option<Span>,
        name: &'static str,
        changes: Vec<String>,
        /// Simulated step time as written and as emitted, in seconds.
        step: (f64, f64),
    },

    // ---- warnings ----
    OverMemory {
        rank: u32,
        peak: f64,
        hbm: f64,
        hardware: String,
    },
    UnusedImport {
        span: Span,
        name: String,
    },
    FewMicrobatches {
        span: Span,
        microbatches: u64,
        ranks: u64,
    },
}

fn did_you_mean(suggestion: &Option<String>) -> Option<String> {
    suggestion.as_ref().map(|s| format!("did you mean `{s}`?"))
}

/// "1 region", "2 regions", "3 microbatches".
/// `8192` as `8_192`: the digit grouping the language accepts.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('_');
        }
        out.push(c);
    }
    out
}

pub fn count(n: impl TryInto<u64>, word: &str) -> String {
    let n: u64 = n.try_into().unwrap_or(u64::MAX);
    match (n, word.ends_with("ch")) {
        (1, _) => format!("1 {word}"),
        (_, true) => format!("{n} {word}es"),
        _ => format!("{n} {word}s"),
    }
}

fn list(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

impl Error {
    pub fn code(&self) -> Code {
        self.to_diagnostic().code
    }

    pub fn to_diagnostic(&self) -> Diagnostic {
        use Error::*;
        fn d(code: Code, message: impl Into<String>) -> Diagnostic {
            Diagnostic::error(code, message)
        }
        match self {
            Syntax { span, expected, found, unclosed } => {
                let label = if expected.is_empty() { "unexpected here".to_string() } else { format!("expected {}", list(expected)) };
                let diag = d(Code::E0001, format!("syntax error: unexpected {found}")).primary(*span, label);
                match unclosed {
                    Some(open) => diag.secondary(*open, "this bracket is never closed").help("close the block before the next statement"),
                    None => diag.help("statements end with `;`, blocks are `name { key = value; }`; see `mpipec explain E0001`"),
                }
            }
            MissingSemicolon { span } => d(Code::E0001, "syntax error: expected `;`")
                .primary(*span, "expected `;` at the end of this line")
                .help("end the statement with `;`")
                .fix(*span, ";"),
            NotUtf8 { span } => d(Code::E0002, "file is not valid UTF-8")
                .primary(*span, "invalid byte sequence here")
                .help("save the plan as UTF-8 text; .mpipe files are text, not binary"),
            NestingTooDeep { span, limit } => d(Code::E0003, "brackets nested too deeply")
                .primary(*span, format!("more than {limit} levels open here"))
                .help("no plan needs this much nesting; check for unclosed `[`, `{` or `(`"),
            FileTooLarge { span, bytes, limit } => d(Code::E0004, format!("file is too large ({bytes} bytes)"))
                .primary(*span, "file starts here")
                .note(format!("mpipec reads plans of at most {limit} bytes"))
                .help("split definitions into files joined with `use \"file.mpipe\"::{…};`"),

            ModuleNotFound { span, path, suggestion } => d(Code::E0101, format!("unknown module `{path}`"))
                .primary(*span, "no such module")
                .help(did_you_mean(suggestion).unwrap_or_else(|| {
                    "the standard library has `std::hardware` and `std::models`; files are imported as `use \"file.mpipe\"::{name};`".into()
                })),
            FileNotFound { span, path, reason } => d(Code::E0102, format!("cannot read imported file `{path}`"))
                .primary(*span, reason.clone())
                .help("paths in `use \"…\"` are relative to the file that contains the `use`"),
            ImportCycle { span, chain } => d(Code::E0103, "import cycle")
                .primary(*span, "this import closes the cycle")
                .note(format!("cycle: {}", chain.join(" -> ")))
                .help("move the shared definitions into a file that neither imports"),
            ItemNotInModule { span, item, module, suggestion } => d(Code::E0104, format!("`{item}` is not defined in `{module}`"))
                .primary(*span, "not found in this module")
                .help(did_you_mean(suggestion).unwrap_or_else(|| format!("see the definitions of `{module}` for the names it provides"))),
            UnknownName { span, name, expected, suggestion, import_from } => d(Code::E0105, format!("cannot find {expected} `{name}`"))
                .primary(*span, "not defined or imported")
                .help(match (import_from, did_you_mean(suggestion)) {
                    (Some((module, found)), _) if found == name => format!("import it: `use {module}::{name};`"),
                    (_, Some(similar)) => similar,
                    (Some((module, found)), None) => {
                        format!("did you mean `{module}::{found}`? import it, `use {module}::{found};`, and write `{found}`")
                    }
                    (None, None) => format!("define `{name}` in this file or import it with `use`"),
                }),
            DuplicateDefinition { span, name, first } => d(Code::E0106, format!("`{name}` is defined more than once"))
                .primary(*span, "defined again here")
                .secondary(*first, "first defined here")
                .help("give one of them another name"),
            ImportOutsideRoot { span, path } => d(Code::E0107, format!("import `{path}` leaves the project directory"))
                .primary(*span, "resolves outside the directory of the plan")
                .help("copy the file into the project, or pass `--allow-outside` to permit it"),
            BadOverride { span, key, keys } => d(Code::E0109, format!("`--set {key}` names nothing in the plan"))
                .primary(*span, "not a key `--set` knows, or the plan has no such part")
                .help(format!("keys are {}", keys.join(", "))),
            PlanInLibrary { span, what } => d(Code::E0108, format!("`{what}` in an imported file"))
                .primary(*span, "only the plan given on the command line may say this")
                .help("imported files hold definitions (`hardware`, `encoder`, `decoder`); move this into the plan"),

            WrongType { span, expected, found, defined_at } => {
                let diag = d(Code::E0201, format!("expected {expected}, found {found}"))
                    .primary(*span, format!("expected {expected}"))
                    .help(format!("write {expected} here"));
                match defined_at {
                    Some(def) => diag.secondary(*def, "defined here"),
                    None => diag,
                }
            }
            UnknownField { span, field, context, suggestion } => d(Code::E0202, format!("unknown field `{field}` in {context}"))
                .primary(*span, "unknown field")
                .help(did_you_mean(suggestion).unwrap_or_else(|| format!("remove it; `mpipec explain E0202` lists the fields of {context}"))),
            MissingField { span, field, context, hint } => d(Code::E0203, format!("missing field `{field}` in {context}"))
                .primary(*span, format!("`{field}` is required here"))
                .help(format!("add `{field} = {hint}`")),
            EmptyModel { span, name } => d(Code::E0203, format!("model `{name}` has no parts"))
                .primary(*span, "a model needs at least one part")
                .help("add one `name = architecture;` per part, in depth order, such as `llm = llama3_8b;`"),
            DuplicateField { span, field, first } => d(Code::E0204, format!("field `{field}` is set twice"))
                .primary(*span, "set again here")
                .secondary(*first, "first set here")
                .help("keep one of them"),
            UnitMismatch { span, expected, found } => {
                let (message, label, help) = match (expected, found) {
                    (Some(e), None) => (format!("missing unit: expected {e}"), "a bare number".to_string(), format!("add a unit such as {}", e.examples())),
                    (Some(e), Some(f)) => (format!("unit mismatch: expected {e}, found {f}"), format!("this is {f}"), format!("use a unit such as {}", e.examples())),
                    // A suffix that is no unit at all is `CountSuffix`; here the unit is known.
                    (None, f) => (
                        format!("unexpected unit: expected a plain number{}", f.map(|f| format!(", found {f}")).unwrap_or_default()),
                        "a count takes no unit".to_string(),
                        "remove the unit".to_string(),
                    ),
                };
                d(Code::E0205, message).primary(*span, label).help(help)
            }
            CountSuffix { span, written, readings } => {
                let help = match readings {
                    Some((decimal, binary)) if decimal != binary => format!(
                        "write the number in full, `{binary}` or `{decimal}`; `_` may group digits, as in `{}`",
                        grouped(*binary)
                    ),
                    Some((n, _)) => format!("write the number in full: `{n}`"),
                    None => "a count is a plain number: remove the suffix".to_string(),
                };
                d(Code::E0205, format!("`{written}` is not a number mpipec reads"))
                    .primary(*span, "a count takes no suffix")
                    .help(help)
            }
            UnknownUnit { span, unit, suggestion } => d(Code::E0206, format!("unknown unit `{unit}`"))
                .primary(*span, "not a unit mpipec knows")
                .help(did_you_mean(suggestion).unwrap_or_else(|| "units: B, KB, MB, GB, TB, KiB…TiB, GB/s, Gbit/s, ns, us, ms, s, TFLOP/s, FLOP".into())),
            OutOfRange { span, what, requirement } => d(Code::E0207, format!("{what} is out of range"))
                .primary(*span, format!("must be {requirement}"))
                .help(format!("change {what} to {requirement}")),
            MissingSection { span, section, example } => d(Code::E0208, format!("the plan has no `{section}`"))
                .primary(*span, format!("`{section}` is missing from this plan"))
                .help(format!("add `{example}`")),
            DuplicateSection { span, section, first } => d(Code::E0209, format!("`{section}` appears more than once"))
                .primary(*span, "again here")
                .secondary(*first, "first here")
                .help(format!("a plan has one `{section}`; merge them")),
            InvalidChoice { span, what, found, choices, suggestion } => d(Code::E0210, format!("`{found}` is not a valid {what}"))
                .primary(*span, format!("expected {}", list(choices)))
                .help(did_you_mean(suggestion).unwrap_or_else(|| format!("write one of {}", list(choices)))),

            UnknownPart { span, name, model, suggestion } => d(Code::E0301, format!("the model has no part `{name}`"))
                .primary(*span, "not a part of the model")
                .secondary(*model, "parts are defined here")
                .help(did_you_mean(suggestion).unwrap_or_else(|| "a cut names the model's parts in depth order".into())),
            CutOutOfOrder { span, previous, detail } => d(Code::E0302, "cut regions are out of order or overlap")
                .primary(*span, detail.clone())
                .secondary(*previous, "after this")
                .help("a cut lists the model's layers once each, in depth order"),
            CutIncomplete { span, missing, fix } => {
                let diag = d(Code::E0303, "the cut does not cover the model")
                    .primary(*span, format!("{missing} not in any region"));
                match fix {
                    Some((stmt, text)) => diag.help(format!("extend the last region: `{text}`")).fix(*stmt, text.clone()),
                    None => diag.help("add the missing layers to a region"),
                }
            }
            BadLayerRange { span, part, layers, detail } => d(Code::E0304, format!("invalid layer range of `{part}`"))
                .primary(*span, detail.clone())
                .note(format!("`{part}` has {layers} layers, numbered 0..{layers}"))
                .help("write `part[start..end]` with start < end <= the part's layer count"),
            ScheduleArity { span, cut, regions, skeletons } => d(Code::E0305, format!("{} for {}", count(*skeletons, "skeleton"), count(*regions, "region")))
                .primary(*span, format!("expected {}, one per region", count(*regions, "skeleton")))
                .secondary(*cut, format!("the cut has {}", count(*regions, "region")))
                .help("give exactly one skeleton per region, in the cut's order"),
            UnknownSkeleton { span, name, suggestion } => d(Code::E0306, format!("unknown skeleton `{name}`"))
                .primary(*span, "not a skeleton")
                .help(did_you_mean(suggestion).unwrap_or_else(|| format!("skeletons: {}", crate::algebra::skeleton::NAMES.join(", ")))),
            BadSkeletonArgument { span, skeleton, message, help } => d(Code::E0307, format!("invalid argument to `{skeleton}`"))
                .primary(*span, message.clone())
                .help(help.clone()),
            ChunksOutOfRange { span, layers } => d(Code::E0319, "`chunks` out of range")
                .primary(*span, match layers {
                    Some(n) => format!("more chunks than the region's {}", count(*n, "layer")),
                    None => "not a whole number of at least 1, nor `auto`".into(),
                })
                .help(match layers {
                    Some(n) => format!("a chunk is at least one layer: write `chunks = {n}` or fewer, or `chunks = auto`"),
                    None => "write `chunks = auto` (the default) or a whole number from 1 to the encoder's layer count".into(),
                }),
            LookaheadOutOfRange { span } => d(Code::E0321, "`lookahead` must be 0 or 1")
                .primary(*span, "not 0 or 1")
                .help("encoder work runs at most one step ahead: write `lookahead = 1`, or leave it out for 0"),
            LookaheadPrefix { span, skeleton } => d(Code::E0323, "`lookahead` with `fill = prefix`")
                .primary(*span, "encodes the next step's microbatches in this step's idle time")
                .secondary(*skeleton, "`prefix` encodes each step's batch as one block before the pipeline")
                .help("the two place encoder work differently: drop `prefix` to look ahead, or drop `lookahead`"),
            LookaheadTrainable { span, part, part_span } => d(Code::E0320, "`lookahead` with a trainable encoder")
                .primary(*span, "encodes the next step's microbatches this step")
                .secondary(*part_span, format!("`{part}` trains: its weights change between steps"))
                .help(format!("features encoded ahead would come from stale weights: drop `lookahead`, or freeze `{part}` (`frozen = true;`)")),
            TransposeOnlyArgument { span, name, skeleton } => d(Code::E0322, format!("`{name}` on `{skeleton}`"))
                .primary(*span, format!("only `transpose` takes `{name}`"))
                .help(format!("`{name}` shapes a replicated encoder's work: remove it here, or give the encoder's region `transpose({name} = …)`")),
            DeviceProduct { span, devices, pp, dp, tp } => {
                let (devices, pp, dp, tp) = (u128::from(*devices), u128::from(*pp), u128::from(*dp), u128::from(*tp));
                let product = pp * dp * tp;
                d(Code::E0308, format!("pp·dp·tp = {product} but the cluster has {devices} devices"))
                    .primary(*span, format!("{pp}·{dp}·{tp} = {product}"))
                    .help(if devices % (pp * tp) == 0 {
                        format!("with pp = {pp} and tp = {tp}, set dp = {}", devices / (pp * tp))
                    } else {
                        "choose pp, dp and tp whose product is the device count".into()
                    })
            }
            MicrobatchesIncompatible { span, skeleton, message, help } => d(Code::E0309, message.clone())
                .primary(*span, "microbatch count set here")
                .secondary(*skeleton, "required by this skeleton")
                .help(help.clone()),
            OwnerWithoutReplicated { span } => d(Code::E0310, "`owner` without a replicated region")
                .primary(*span, "no region of this plan is replicated")
                .help("remove `owner`, or give a region the `transpose` skeleton"),
            BadOwner { span, message, label, help } => d(Code::E0311, message.clone()).primary(*span, label.clone()).help(help.clone()),
            AdjacentReplicated { first, second, merged, fix } => {
                let diag = d(Code::E0312, "two adjacent replicated regions")
                    .primary(*second, "replicated, right after a replicated region")
                    .secondary(*first, "replicated too")
                    .note("adjacent replicated regions are one region written twice (normal form)")
                    .help(format!("merge them, `{merged}`, and give the merged region one `transpose`"));
                match fix {
                    Some((span, text)) => diag.fix(*span, text.clone()),
                    None => diag,
                }
            }
            ReplicatedWithoutSharded { span } => d(Code::E0313, "no sharded region to hand the replicated region's output to")
                .primary(*span, "every region of this schedule is replicated")
                .help("a plan that only replicates is data parallelism; give the backbone a sharded skeleton such as `1f1b`"),
            TooFewLayers { span, region, layers, stages } => d(Code::E0314, format!("region `{region}` has {} for {stages} stages", count(*layers, "layer")))
                .primary(*span, format!("needs at least {stages} layers, one per stage"))
                .help("use fewer pipeline ranks or chunks, or give the region more layers"),
            BadSplit { span, message, help } => d(Code::E0315, message.clone()).primary(*span, "this split").help(help.clone()),
            UnsupportedArrangement { span, message, label, help } => {
                d(Code::E0317, message.clone()).primary(*span, label.clone()).help(help.clone())
            }
            TooLarge { span, events, limit } => d(Code::E0318, format!("the plan is too large to derive: {events} events per step"))
                .primary(*span, "this many microbatches on this many stages")
                .note(format!("mpipec derives plans of at most {limit} events (forwards, backwards and their halves) per step"))
                .help("use fewer microbatches or pipeline stages; real plans need far fewer"),
            UnknownTarget { span, name, suggestion, targets } => d(Code::E0316, format!("unknown target `{name}`"))
                .primary(*span, "not a backend")
                .help(did_you_mean(suggestion).unwrap_or_else(|| format!("targets: {}", targets.join(", ")))),

            NotNative { span, target, name, changes } => {
                let mut diag = d(Code::E0401, format!("`{name}` cannot run this schedule as written"))
                    .primary(*span, format!("`{name}` has no native form of this"));
                if let Some(t) = target {
                    diag = diag.secondary(*t, "target requested here");
                }
                for change in changes {
                    diag = diag.note(format!("its nearest native plan: {change}"));
                }
                diag.help(format!(
                    "emit that plan with `--nearest` (or `target {name}(nearest);`), or build for `torch`, which runs every plan as written"
                ))
            }
            TargetCannotRun { span, target, name, reason, help } => {
                let mut diag = d(Code::E0402, format!("`{name}` cannot run this plan")).primary(*span, reason.clone());
                if let Some(t) = target {
                    diag = diag.secondary(*t, "target requested here");
                }
                diag.help(help.clone())
            }
            NearestEmitted { span, target, name, changes, step: (before, after) } => {
                let mut diag = d(Code::W0004, format!("`{name}` gets the nearest native plan, not the plan as written"))
                    .primary(*span, "replaced for this target");
                if let Some(t) = target {
                    diag = diag.secondary(*t, "`nearest` asked for here");
                }
                for change in changes {
                    diag = diag.note(change.clone());
                }
                diag.note(format!(
                    "simulated step: {before:.3} s as written, {after:.3} s as emitted ({:+.1}%)",
                    100.0 * (after / before - 1.0)
                ))
                .help("build for `torch` to run the plan as written")
            }
            OverMemory { rank, peak, hbm, hardware } => d(
                Code::W0003,
                format!("pipeline rank {rank} needs {:.1} GiB of device memory, `{hardware}` has {:.1} GiB", peak / 1073741824.0, hbm / 1073741824.0),
            )
            .note("weights, gradients and optimizer state, plus the activations the schedule keeps alive at its peak")
            .help("use more pipeline or tensor-parallel ranks, fewer microbatches in flight, recompute, or `distributed_optimizer = true`"),
            UnusedImport { span, name } => d(Code::W0001, format!("unused import `{name}`"))
                .primary(*span, "imported but never used")
                .help("remove it"),
            FewMicrobatches { span, microbatches, ranks } => d(Code::W0002, format!("{} for {ranks} pipeline ranks", count(*microbatches, "microbatch")))
                .primary(*span, "fewer microbatches than pipeline ranks")
                .note(format!("with M < P the pipeline never fills; the bubble is at least {:.0}% of the step", 100.0 * (*ranks as f64 - 1.0) / (*microbatches as f64 + *ranks as f64 - 1.0)))
                .help(format!("use at least {ranks} microbatches, ideally several times that")),
        }
    }
}
