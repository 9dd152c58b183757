//! Comments, found by the parser's raw scan (the grammar skips them), so `fmt` can put each
//! one back next to the code it was written beside.

#[derive(Clone, Debug, PartialEq)]
pub struct Comment {
    pub start: usize,
    pub end: usize,
    /// Nothing but whitespace before it on its line.
    pub own_line: bool,
}

pub fn scan(src: &str) -> Vec<Comment> {
    let mut out = Vec::new();
    crate::parse::scan::scan(src, |l| {
        if let crate::parse::scan::Lexeme::Comment { start, end } = l {
            let line_start = src[..start].rfind('\n').map(|p| p + 1).unwrap_or(0);
            let own_line = src[line_start..start].trim().is_empty();
            out.push(Comment { start, end, own_line });
        }
    });
    out
}
