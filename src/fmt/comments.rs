//! Comments, found by a scan of the source (the grammar skips them), so `fmt` can put each
//! one back next to the code it was written beside.

#[derive(Clone, Debug, PartialEq)]
pub struct Comment {
    pub start: usize,
    pub end: usize,
    /// Nothing but whitespace before it on its line.
    pub own_line: bool,
    /// A `/* */` comment with text after it on the same line is kept with that text.
    pub block: bool,
}

pub fn scan(src: &str) -> Vec<Comment> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'/' if matches!(bytes.get(i + 1), Some(b'/') | Some(b'*')) => {
                let start = i;
                let block = bytes[i + 1] == b'*';
                if block {
                    i += 2;
                    while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                        i += 1;
                    }
                    i = (i + 2).min(bytes.len());
                } else {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                let line_start = src[..start].rfind('\n').map(|p| p + 1).unwrap_or(0);
                let own_line = src[line_start..start].trim().is_empty();
                out.push(Comment { start, end: i, own_line, block });
            }
            _ => i += 1,
        }
    }
    out
}
