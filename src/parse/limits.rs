//! Limits checked before pest runs. pest descends recursively, so unbounded nesting would
//! overflow the stack; a file past any real plan's size is refused instead of parsed slowly.

use crate::error::{Error, InputError};
use crate::span::{FileId, Span};

/// Brackets, braces and parentheses open at once; real plans need 3.
pub const MAX_NESTING: usize = 64;
/// 16 MiB: a plan with every stdlib definition inlined is under 100 KiB.
pub const MAX_FILE_BYTES: usize = 16 << 20;

pub fn check(file: FileId, text: &str) -> Result<(), Error> {
    if text.len() > MAX_FILE_BYTES {
        return Err(Error::Input(InputError::FileTooLarge {
            span: Span::new(file, 0, 0),
            bytes: text.len(),
            limit: MAX_FILE_BYTES,
        }));
    }
    let mut depth = 0usize;
    let mut result = Ok(());
    brackets(text, |i, open| {
        if open {
            depth += 1;
            if depth > MAX_NESTING && result.is_ok() {
                result = Err(Error::Input(InputError::NestingTooDeep {
                    span: Span::new(file, i, i + 1),
                    limit: MAX_NESTING,
                }));
            }
        } else {
            depth = depth.saturating_sub(1);
        }
    });
    result
}

/// The opening bracket that is never closed, if any: a syntax error's best secondary label.
pub fn unclosed(text: &str) -> Option<usize> {
    let mut open: Vec<usize> = Vec::new();
    let mut first_unmatched = None;
    brackets(text, |i, is_open| {
        if is_open {
            open.push(i);
        } else if open.pop().is_none() && first_unmatched.is_none() {
            first_unmatched = Some(i);
        }
    });
    open.first().copied().or(first_unmatched).filter(|_| first_unmatched.is_none())
}

/// Calls `f(offset, is_open)` for every bracket outside strings and comments.
fn brackets(text: &str, mut f: impl FnMut(usize, bool)) {
    super::scan::scan(text, |l| match l {
        super::scan::Lexeme::Open(i) => f(i, true),
        super::scan::Lexeme::Close(i) => f(i, false),
        super::scan::Lexeme::Comment { .. } => {}
    });
}
