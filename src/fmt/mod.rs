//! `mpipec fmt`: the canonical form of a file. Four-space indents, one field per line, one
//! space around `=` and after `,`; numbers, strings and comments exactly as written; at most
//! one blank line kept where the source had some. Formatting a formatted file changes nothing.

mod comments;

use crate::ast::*;
use crate::error::Error;
use crate::parse;
use crate::span::FileId;
use comments::Comment;

/// Longest line a nested block is folded onto (`enc = vit { frozen = true; }`).
const FOLD_WIDTH: usize = 100;

pub fn format(src: &str) -> Result<String, Error> {
    let module = parse::parse(FileId(0), src)?;
    let mut p = Printer {
        src,
        comments: comments::scan(src),
        next: 0,
        out: String::new(),
        indent: 0,
        last_end: 0,
        force_blank: false,
        lines: 0,
        trailing_at: Vec::new(),
        line_comment_open: false,
    };
    let mut previous_multiline = false;
    for (i, item) in module.items.iter().enumerate() {
        let multiline = matches!(item, Item::Definition(_) | Item::Section(_));
        if i > 0 && (multiline || previous_multiline) {
            p.force_blank = true;
        }
        p.item(item);
        previous_multiline = multiline;
    }
    p.flush_comments(src.len());
    let mut out = align_trailing(&p.out, &p.trailing_at);
    while out.ends_with("\n\n") {
        out.pop();
    }
    Ok(out)
}

/// Aligns the trailing comments of consecutive lines to one column, as gofmt does, so a
/// block of commented fields reads as a table. `at` holds (line, width of its code).
fn align_trailing(out: &str, at: &[(usize, usize)]) -> String {
    let mut lines: Vec<String> = out.split('\n').map(str::to_string).collect();
    let mut i = 0;
    while i < at.len() {
        let mut j = i;
        while j + 1 < at.len() && at[j + 1].0 == at[j].0 + 1 {
            j += 1;
        }
        let column = at[i..=j].iter().map(|(_, w)| *w).max().unwrap_or(0) + 1;
        for &(line, width) in &at[i..=j] {
            let text = &lines[line];
            let split = text.char_indices().nth(width).map(|(b, _)| b).unwrap_or(text.len());
            let (code, comment) = text.split_at(split);
            lines[line] = format!("{code}{}{}", " ".repeat(column - width), comment.trim_start());
        }
        i = j + 1;
    }
    lines.join("\n")
}

struct Printer<'a> {
    src: &'a str,
    comments: Vec<Comment>,
    next: usize,
    out: String,
    indent: usize,
    /// Source offset up to which everything has been printed.
    last_end: usize,
    force_blank: bool,
    /// Lines printed so far.
    lines: usize,
    /// Lines that carry a trailing comment: (line, width of the code before it).
    trailing_at: Vec<(usize, usize)>,
    /// The line printed last ends in a `//` comment: nothing more can go on it.
    line_comment_open: bool,
}

impl Printer<'_> {
    fn comment_text(&self, c: &Comment) -> &str {
        self.src[c.start..c.end].trim_end()
    }

    /// Whether the source has a blank line between `from` and `to`.
    fn blank_between(&self, from: usize, to: usize) -> bool {
        let gap = &self.src[from.min(to)..to];
        let mut newlines = 0;
        for c in gap.chars() {
            match c {
                '\n' => {
                    newlines += 1;
                    if newlines >= 2 {
                        return true;
                    }
                }
                c if c.is_whitespace() => {}
                _ => newlines = 0,
            }
        }
        false
    }

    fn at_block_start(&self) -> bool {
        self.out.is_empty() || self.out.ends_with("{\n")
    }

    fn blank_line_if(&mut self, wanted: bool) {
        if wanted && !self.at_block_start() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
            self.lines += 1;
        }
    }

    fn push_line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
        // A block comment may span lines: every line counts for the alignment's line numbers.
        self.lines += 1 + text.matches('\n').count();
        self.line_comment_open = false;
    }

    fn push_comment_line(&mut self, comment: &str) {
        self.push_line(comment);
        self.line_comment_open = comment.starts_with("//");
    }

    /// Appends `comment` to the line printed last.
    fn append_comment(&mut self, comment: &str) {
        if self.line_comment_open {
            return self.push_comment_line(comment);
        }
        self.out.pop();
        let line_start = self.out.rfind('\n').map(|p| p + 1).unwrap_or(0);
        let width = self.out[line_start..].chars().count();
        // Only a line's first trailing comment is aligned: padding before a later one would
        // shift the split points recorded for the line, landing them inside a comment.
        let line = self.lines - 1;
        if self.trailing_at.last().map(|&(l, _)| l) != Some(line) {
            self.trailing_at.push((line, width));
        }
        self.out.push(' ');
        self.out.push_str(comment);
        self.out.push('\n');
        self.lines += comment.matches('\n').count();
        self.line_comment_open = comment.starts_with("//");
    }

    /// Prints the comments that start before `pos`: own-line ones on their own lines,
    /// others at the end of the line printed last.
    fn flush_comments(&mut self, pos: usize) {
        while self.next < self.comments.len() && self.comments[self.next].start < pos {
            let c = self.comments[self.next].clone();
            self.next += 1;
            if c.own_line || self.out.is_empty() {
                let blank = self.blank_between(self.last_end, c.start);
                self.blank_line_if(blank);
                let text = self.comment_text(&c).to_string();
                self.push_comment_line(&text);
            } else {
                let text = self.comment_text(&c).to_string();
                self.append_comment(&text);
            }
            self.last_end = c.end;
        }
    }

    /// Prints one line of code standing for source `start..end`, with the comments before
    /// it, inside it and after it on the same source line.
    fn line(&mut self, text: &str, start: usize, end: usize) {
        self.flush_comments(start);
        let blank = self.blank_between(self.last_end, start);
        self.blank_line_if(blank);
        self.push_line(text);
        self.last_end = end;
        let line_end = self.src[end..].find('\n').map(|p| end + p).unwrap_or(self.src.len());
        self.trailing(line_end.max(end));
    }

    /// Attaches comments starting before `until` to the line just printed, as long as they
    /// follow its code with nothing between: one on a later line, or after more code on the
    /// same source line (`model m { enc = vit; // c`), belongs to that code and is left to
    /// `flush_comments` or to that code's own line.
    fn trailing(&mut self, until: usize) {
        while self.next < self.comments.len() && self.comments[self.next].start < until {
            let c = self.comments[self.next].clone();
            let gap = &self.src[self.last_end.min(c.start)..c.start];
            if self.line_comment_open || gap.contains('\n') || !gap.trim().is_empty() {
                break;
            }
            self.next += 1;
            let text = self.comment_text(&c).to_string();
            self.append_comment(&text);
            self.last_end = self.last_end.max(c.end);
        }
    }

    fn item(&mut self, item: &Item) {
        let span = item.span();
        if self.force_blank_take() {
            self.flush_comments(span.start as usize);
            self.blank_line_if(true);
        }
        match item {
            Item::Definition(d) => {
                let header = format!("{} {}", d.kind.keyword(), d.name.name);
                self.block(&header, span.start as usize, &d.body, false);
            }
            Item::Section(s) => self.block(s.kind.keyword(), span.start as usize, &s.body, false),
            _ => {
                let text = statement(self.src, item).expect("every item but a block is one statement");
                self.line(&text, span.start as usize, span.end as usize)
            }
        }
    }

    /// `header { entries }`; nested blocks fold onto one line when short and comment-free.
    fn block(&mut self, header: &str, start: usize, body: &Block, nested: bool) {
        let (open, close) = (body.span.start as usize, body.span.end as usize - 1);
        if nested && let Some(folded) = self.folded(body) {
            let text = format!("{header} {folded}");
            if text.len() + 4 * self.indent <= FOLD_WIDTH {
                self.line(&text, start, body.span.end as usize);
                return;
            }
        }
        if body.entries.is_empty() && !self.has_comments(open, close) {
            self.line(&format!("{header} {{}}"), start, body.span.end as usize);
            return;
        }
        self.line(&format!("{header} {{"), start, open + 1);
        self.indent += 1;
        for entry in &body.entries {
            self.entry(entry);
        }
        self.flush_comments(close);
        self.indent -= 1;
        self.line("}", close, close + 1);
    }

    fn has_comments(&self, from: usize, to: usize) -> bool {
        self.comments.iter().any(|c| c.start >= from && c.start < to)
    }

    /// `{ a = 1; b = 2; }` when every entry is a plain field and there is no comment inside.
    fn folded(&self, body: &Block) -> Option<String> {
        if body.entries.is_empty() || self.has_comments(body.span.start as usize, body.span.end as usize) {
            return None;
        }
        let mut parts = Vec::new();
        for entry in &body.entries {
            match entry {
                Entry::Field(f) if !matches!(f.value.kind, ValueKind::Instance { .. }) => {
                    parts.push(format!("{} = {};", f.key.name, value(self.src, &f.value)))
                }
                _ => return None,
            }
        }
        Some(format!("{{ {} }}", parts.join(" ")))
    }

    fn entry(&mut self, entry: &Entry) {
        match entry {
            Entry::Field(f) => match &f.value.kind {
                ValueKind::Instance { base, body } => {
                    let header = format!("{} = {}", f.key.name, base.name);
                    self.block(&header, f.span.start as usize, body, true);
                }
                _ => {
                    let text = format!("{} = {};", f.key.name, value(self.src, &f.value));
                    self.line(&text, f.span.start as usize, f.span.end as usize);
                }
            },
            Entry::Block(b) => self.block(&b.key.name, b.span.start as usize, &b.body, true),
        }
    }
}

// A blank line demanded around multi-line items, taken once by the next item.
impl Printer<'_> {
    fn force_blank_take(&mut self) -> bool {
        std::mem::take(&mut self.force_blank)
    }
}

/// A one-line item in canonical form (`None` for a definition or a section, which are blocks);
/// `src` is the text its spans point into.
pub fn statement(src: &str, item: &Item) -> Option<String> {
    Some(match item {
        Item::Definition(_) | Item::Section(_) => return None,
        Item::Use(u) => use_decl(src, u),
        Item::Cut(c) => format!("cut {};", c.regions.iter().map(region).collect::<Vec<_>>().join(" | ")),
        Item::Schedule(s) => {
            format!("schedule {};", s.skeletons.iter().map(|k| skeleton(src, k)).collect::<Vec<_>>().join(", "))
        }
        Item::Owner(o) => format!("owner {};", value(src, &o.spec)),
        Item::Target(t) => {
            let names: Vec<String> = t
                .targets
                .iter()
                .map(|t| match &t.option {
                    Some(option) => format!("{}({})", t.name.name, option.name),
                    None => t.name.name.clone(),
                })
                .collect();
            format!("target {};", names.join(", "))
        }
    })
}

/// `key = value;` on one line, a nested block folded (`enc = vit { frozen = true; }`); `src`
/// is the text the value's spans point into. The file's formatting unfolds it where it is long.
pub fn field(src: &str, key: &str, v: &Value) -> String {
    match &v.kind {
        ValueKind::Instance { base, body } => {
            let entries: Vec<String> = body.entries.iter().map(|e| entry_line(src, e)).collect();
            format!("{key} = {} {{ {} }}", base.name, entries.join(" "))
        }
        _ => format!("{key} = {};", value(src, v)),
    }
}

fn entry_line(src: &str, entry: &Entry) -> String {
    match entry {
        Entry::Field(f) => field(src, &f.key.name, &f.value),
        Entry::Block(b) => {
            let entries: Vec<String> = b.body.entries.iter().map(|e| entry_line(src, e)).collect();
            format!("{} {{ {} }}", b.key.name, entries.join(" "))
        }
    }
}

fn use_decl(src: &str, u: &UseDecl) -> String {
    let source = match &u.source {
        UseSource::Path(p) => p.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join("::"),
        UseSource::File(s) => src[s.span.range()].to_string(),
    };
    let names: Vec<&str> = u.items.iter().map(|i| i.name.as_str()).collect();
    if u.grouped { format!("use {source}::{{{}}};", names.join(", ")) } else { format!("use {source}::{};", names[0]) }
}

fn region(r: &RegionExpr) -> String {
    let segments: Vec<String> = r
        .segments
        .iter()
        .map(|s| match &s.range {
            Some(range) => format!("{}[{}..{}]", s.part.name, range.start, range.end),
            None => s.part.name.clone(),
        })
        .collect();
    segments.join(" + ")
}

fn skeleton(src: &str, k: &SkeletonExpr) -> String {
    match &k.args {
        None => k.name.name.clone(),
        Some(args) => {
            let args: Vec<String> = args
                .iter()
                .map(|a| match &a.name {
                    Some(n) => format!("{} = {}", n.name, value(src, &a.value)),
                    None => value(src, &a.value),
                })
                .collect();
            format!("{}({})", k.name.name, args.join(", "))
        }
    }
}

fn value(src: &str, v: &Value) -> String {
    match &v.kind {
        ValueKind::Number(q) => match &q.unit {
            Some(u) => format!("{}{}", q.digits, u.name),
            None => q.digits.clone(),
        },
        ValueKind::String(_) => src[v.span.range()].to_string(),
        ValueKind::Bool(b) => b.to_string(),
        ValueKind::Name(n) => n.name.clone(),
        ValueKind::List(items) => format!("[{}]", items.iter().map(|i| value(src, i)).collect::<Vec<_>>().join(", ")),
        ValueKind::Instance { .. } => unreachable!("instances are printed as blocks"),
    }
}
