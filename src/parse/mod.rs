//! Text to syntax tree: the pest grammar in `grammar/mpipe.pest`, a guard against input that
//! would exhaust the parser (nesting depth, size), and the lowering of pest pairs to `ast`.

mod limits;
mod lower;
pub mod scan;

use pest::Parser;
use pest_derive::Parser;

use crate::ast::Module;
use crate::error::{Error, InputError};
use crate::span::{FileId, Span};

pub use limits::{MAX_FILE_BYTES, MAX_NESTING};

#[derive(Parser)]
#[grammar = "../grammar/mpipe.pest"]
pub(crate) struct MpipeParser;

/// Parses one file. A syntax error stops that file (pest reports its furthest failure only);
/// everything after parsing collects all errors instead.
pub fn parse(file: FileId, text: &str) -> Result<Module, Error> {
    limits::check(file, text)?;
    // Records the literal tokens tried at the failure point, so "expected `;`" can be said.
    pest::set_error_detail(true);
    let mut pairs = MpipeParser::parse(Rule::file, text).map_err(|e| syntax_error(file, text, e))?;
    Ok(lower::module(file, pairs.next().expect("grammar: file is the start rule")))
}

/// What a `--set` key takes: one value, or the body of one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    Value,
    Cut,
    Schedule,
    Owner,
    Target,
}

impl Takes {
    fn rule(self) -> Rule {
        match self {
            Takes::Value => Rule::set_value,
            Takes::Cut => Rule::set_cut,
            Takes::Schedule => Rule::set_schedule,
            Takes::Owner => Rule::set_owner,
            Takes::Target => Rule::set_target,
        }
    }

    /// What the value must be, as a diagnostic says it.
    pub fn describe(self) -> &'static str {
        match self {
            Takes::Value => "one value",
            Takes::Cut => "one cut (`enc | llm`)",
            Takes::Schedule => "one schedule (`transpose, 1f1b`)",
            Takes::Owner => "one owner map (`round_robin` or a list)",
            Takes::Target => "a list of targets (`megatron, torch`)",
        }
    }
}

/// A `--set` value as the syntax tree holds it.
#[derive(Clone, Debug)]
pub enum Setting {
    /// A field's value, or a part's architecture.
    Value(crate::ast::Value),
    /// A statement (`cut`, `schedule`, `owner`, `target`) that replaces the plan's.
    Item(crate::ast::Item),
}

/// Parses the flag `KEY=VALUE` (the text of `file`), its value as exactly what the key takes.
pub fn setting(file: FileId, flag: &str, takes: Takes) -> Result<Setting, Error> {
    limits::check(file, flag)?;
    pest::set_error_detail(true);
    let mut pairs = MpipeParser::parse(takes.rule(), flag).map_err(|e| syntax_error(file, flag, e))?;
    Ok(lower::setting(file, pairs.next().expect("grammar: a set_* rule is the start rule")))
}

fn syntax_error(file: FileId, text: &str, error: pest::error::Error<Rule>) -> Error {
    let (start, end) = match error.location {
        pest::error::InputLocation::Pos(p) => (p, p),
        pest::error::InputLocation::Span((s, e)) => (s, e),
    };
    let mut expected: Vec<&'static str> = match &error.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            positives.iter().filter_map(|r| describe(*r)).collect()
        }
        pest::error::ErrorVariant::CustomError { .. } => Vec::new(),
    };
    let (mut start, mut end) = (start, end);
    if let Some(attempts) = error.parse_attempts() {
        // `ParsingToken` is not exported by pest; its Display is the literal itself.
        let tokens: Vec<&'static str> = attempts
            .expected_tokens()
            .iter()
            .filter_map(|token| PUNCTUATION.iter().find(|(t, _)| *t == token.to_string()).map(|p| p.1))
            .collect();
        // A literal tried further on than the rules (the `::` after `use "x.mpipe"`) is where
        // the text went wrong; the rules' alternatives belong to where the statement began.
        if attempts.max_position > start && !tokens.is_empty() {
            (start, end) = (attempts.max_position, attempts.max_position);
            expected.clear();
        }
        expected.extend(tokens);
    }
    if let Some(found) = misspelling(file, text, start) {
        return found;
    }
    let found = describe_found(&text[start..]);
    let end = if end > start { end } else { start + found.1 };
    if expected.contains(&"a field name") {
        // Inside a block `}` is always possible; pest records only the alternative it tried last.
        expected.push("`}`");
    }
    expected.sort_unstable();
    expected.dedup();
    if let Some(end) = expected.contains(&"`;`").then(|| missing_semicolon(text, start)).flatten() {
        return Error::Input(InputError::MissingSemicolon { span: Span::new(file, end, end) });
    }
    let unclosed = limits::unclosed(text).filter(|&o| o < start).map(|o| Span::new(file, o, o + 1));
    let statement = expected.contains(&"`schedule`").then(|| word_at(&text[start..])).flatten();
    let suggestion = statement.and_then(|w| crate::suggest::did_you_mean(w, STATEMENT_WORDS.iter().copied()));
    Error::Input(InputError::Syntax {
        span: Span::new(file, start, end),
        expected,
        found: found.0,
        unclosed,
        suggestion,
    })
}

/// The words that begin an item, for "did you mean" on a misspelled one (`schedul`).
const STATEMENT_WORDS: &[&str] =
    &["use", "hardware", "encoder", "decoder", "model", "cluster", "batch", "cut", "schedule", "owner", "target"];

/// The word (digits, ASCII letters, `_` and `.`) that `text` ends with.
fn word_before(text: &str) -> Option<&str> {
    text.rsplit(|c: char| !(c.is_ascii_alphanumeric() || "_.".contains(c))).next()
}

/// The ASCII word at the start of `rest`, if one is there.
fn word_at(rest: &str) -> Option<&str> {
    let len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
    (len > 0).then(|| &rest[..len])
}

/// Two mistakes whose cause is plain from the text where parsing stopped: a space between a
/// number and its unit (`12 GB`), and a letter outside ASCII in a name (`vlmé`).
fn misspelling(file: FileId, text: &str, start: usize) -> Option<Error> {
    let rest = &text[start..];
    // pest stops before the space or after it, depending on what it tried last.
    let before = text[..start].trim_end_matches([' ', '\t']);
    let after = rest.trim_start_matches([' ', '\t']);
    let gap = Span::new(file, before.len(), text.len() - after.len());
    let unit = after.split(|c: char| !(c.is_ascii_alphabetic() || c == '/' || c == '%')).next().unwrap_or("");
    let number = word_before(before).filter(|n| n.starts_with(|c: char| c.is_ascii_digit()));
    if let Some(number) = number.filter(|_| gap.end > gap.start && crate::units::lookup(unit).is_some()) {
        return Some(Error::Input(InputError::SpacedUnit { span: gap, number: number.into(), unit: unit.into() }));
    }
    let number = word_before(&text[..start]);
    let c = rest.chars().next()?;
    if !c.is_ascii() && c.is_alphanumeric() {
        let name_start = start - number.map_or(0, str::len);
        let len =
            text[name_start..].find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len() - name_start);
        let span = Span::new(file, name_start, name_start + len);
        return Some(Error::Input(InputError::NonAsciiName { span, name: text[name_start..name_start + len].into() }));
    }
    None
}

/// Where a `;` is missing when the parser, wanting one, stopped on a later line than the last
/// code before it: the end of that code. pest points at the next line's first token (or the
/// newline after a number), which is not where the fix goes.
fn missing_semicolon(text: &str, stop: usize) -> Option<usize> {
    let mut comments = Vec::new();
    scan::scan(text, |l| {
        if let scan::Lexeme::Comment { start, end } = l {
            comments.push((start, end));
        }
    });
    let mut end = stop;
    loop {
        end = text[..end].trim_end().len();
        match comments.iter().find(|c| c.1 == end && c.0 < end) {
            Some(c) => end = c.0,
            None => break,
        }
    }
    let mut next = stop;
    loop {
        next += text[next..].len() - text[next..].trim_start().len();
        match comments.iter().find(|c| c.0 == next) {
            Some(c) => next = c.1,
            None => break,
        }
    }
    (end > 0 && text[end..next].contains('\n')).then_some(end)
}

/// Punctuation the grammar spells as literals, as "expected …" names it.
const PUNCTUATION: &[(&str, &str)] = &[
    (";", "`;`"),
    ("|", "`|`"),
    ("+", "`+`"),
    (",", "`,`"),
    ("=", "`=`"),
    ("{", "`{`"),
    ("}", "`}`"),
    ("[", "`[`"),
    ("]", "`]`"),
    ("(", "`(`"),
    (")", "`)`"),
    ("::", "`::`"),
    ("..", "`..`"),
];

/// What the parser stopped at, for the diagnostic's note, and its length in bytes.
fn describe_found(rest: &str) -> (String, usize) {
    let Some(c) = rest.chars().next() else {
        return ("end of file".into(), 0);
    };
    if c.is_alphanumeric() || c == '_' {
        let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let len = word.len();
        return (format!("`{word}`"), len);
    }
    if c.is_control() || c == '\u{FFFD}' {
        return (format!("the character U+{:04X}", c as u32), c.len_utf8());
    }
    (format!("`{c}`"), c.len_utf8())
}

/// The words a user reads in "expected …"; `None` hides a rule that only confuses.
fn describe(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::EOI => "end of file",
        Rule::use_decl | Rule::kw_use => "`use`",
        Rule::definition | Rule::def_kind => "a definition (`hardware`, `encoder`, `decoder`, `model`)",
        Rule::section | Rule::section_kind => "a section (`cluster`, `batch`)",
        Rule::kw_hardware | Rule::kw_encoder | Rule::kw_decoder | Rule::kw_model => {
            "a definition (`hardware`, `encoder`, `decoder`, `model`)"
        }
        Rule::kw_cluster | Rule::kw_batch => "a section (`cluster`, `batch`)",
        Rule::cut_stmt | Rule::kw_cut => "`cut`",
        Rule::schedule_stmt | Rule::kw_schedule => "`schedule`",
        Rule::owner_stmt | Rule::kw_owner => "`owner`",
        Rule::target_stmt | Rule::kw_target => "`target`",
        Rule::module_path => "a module path",
        Rule::use_group => "`{`",
        Rule::block => "`{`",
        Rule::field | Rule::sub_block | Rule::key => "a field name",
        Rule::instance => "a name",
        Rule::list => "`[`",
        Rule::quantity | Rule::number => "a number",
        Rule::integer => "an integer",
        Rule::unit => "a unit",
        Rule::boolean => "`true` or `false`",
        Rule::string => "a string",
        Rule::name | Rule::ident => "a name",
        Rule::region | Rule::segment => "a part name",
        Rule::layer_range => "`[`",
        Rule::skeleton | Rule::skeleton_name => "a skeleton",
        Rule::args => "`(`",
        Rule::arg => "an argument",
        Rule::target | Rule::target_name => "a target",
        Rule::target_option => "a target option (`nearest`)",
        Rule::keyword => "a keyword",
        Rule::word => "a name",
        Rule::value => "a value",
        Rule::set_key => "`=`",
        Rule::file
        | Rule::set_value
        | Rule::set_cut
        | Rule::set_schedule
        | Rule::set_owner
        | Rule::set_target
        | Rule::item
        | Rule::ident_char
        | Rule::WHITESPACE
        | Rule::COMMENT
        | Rule::line_comment
        | Rule::block_comment => {
            return None;
        }
    })
}
