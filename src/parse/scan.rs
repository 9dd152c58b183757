//! A scan of the raw text for what the grammar hides or would trip over: comments (which
//! `fmt` puts back) and brackets outside strings and comments (which the limits count and
//! syntax errors point at).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lexeme {
    /// A `//` or `/* */` comment over `start..end`.
    Comment {
        start: usize,
        end: usize,
    },
    Open(usize),
    Close(usize),
}

pub fn scan(text: &str, mut f: impl FnMut(Lexeme)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if matches!(bytes.get(i + 1), Some(b'/') | Some(b'*')) => {
                let start = i;
                if bytes[i + 1] == b'*' {
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
                f(Lexeme::Comment { start, end: i });
                continue;
            }
            b'(' | b'[' | b'{' => f(Lexeme::Open(i)),
            b')' | b']' | b'}' => f(Lexeme::Close(i)),
            _ => {}
        }
        i += 1;
    }
}
