//! Printing diagnostics in the chosen format, and the closing summary.

use std::io::{IsTerminal, Write};

use mpipe::diagnostics::render::{self, Style};
use mpipe::diagnostics::{Diagnostic, json};
use mpipe::span::SourceMap;

use super::{ColorChoice, Global, MessageFormat};

pub struct Reporter {
    format: MessageFormat,
    color: bool,
    errors: usize,
    warnings: usize,
    /// Off for `mpipec bench`, which builds the same plans many times: counted, not printed.
    print: bool,
}

impl Reporter {
    pub fn new(global: &Global) -> Reporter {
        let color = match global.color {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stderr().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::env::var("TERM").map_or(true, |t| t != "dumb")
            }
        };
        Reporter {
            format: global.message_format,
            color: color && global.message_format != MessageFormat::Json,
            errors: 0,
            warnings: 0,
            print: true,
        }
    }

    /// A reporter that counts diagnostics and prints nothing.
    pub fn silent(global: &Global) -> Reporter {
        Reporter { print: false, ..Reporter::new(global) }
    }

    pub fn emit(&mut self, diagnostics: &[Diagnostic], sources: &SourceMap) {
        for d in diagnostics {
            if d.is_error() {
                self.errors += 1;
            } else {
                self.warnings += 1;
            }
            if !self.print {
                continue;
            }
            match self.format {
                MessageFormat::Json => println!("{}", json::to_json(d, sources)),
                MessageFormat::Human => {
                    eprint!("{}", render::render(d, sources, Style::Human, self.color))
                }
                MessageFormat::Short => {
                    eprint!("{}", render::render(d, sources, Style::Short, self.color))
                }
            }
        }
    }

    /// A problem outside any source file (a file that cannot be read, say).
    pub fn plain_error(&mut self, message: &str) {
        self.errors += 1;
        if !self.print {
            return;
        }
        match self.format {
            MessageFormat::Json => println!("{}", json::plain_error_json(message)),
            _ => eprint!("{}", render::plain_error(message)),
        }
    }

    pub fn errors(&self) -> usize {
        self.errors
    }

    pub fn finish(&self) {
        if !self.print {
            return;
        }
        match self.format {
            MessageFormat::Json => println!("{}", json::summary_json(self.errors, self.warnings)),
            _ => {
                if let Some(line) = render::summary(self.errors, self.warnings) {
                    eprintln!("{line}");
                }
            }
        }
        let _ = std::io::stdout().flush();
    }
}
