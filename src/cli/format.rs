//! `mpipec fmt [--check] FILE…` and `mpipec fmt --stdin`.

use std::io::Read;
use std::path::PathBuf;

use mpipe::span::SourceMap;

use super::loader::io_reason;
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

pub fn run(global: &Global, files: &[PathBuf], check: bool, stdin: bool) -> u8 {
    let mut reporter = Reporter::new(global);
    if stdin {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            reporter.plain_error(&format!("cannot read standard input: {e}"));
            reporter.finish();
            return EXIT_USAGE;
        }
        return match format_one(&mut reporter, "<stdin>", &text) {
            Some(formatted) => {
                print!("{formatted}");
                if check && formatted != text { EXIT_INPUT } else { 0 }
            }
            None => {
                reporter.finish();
                EXIT_INPUT
            }
        };
    }
    let mut status = 0;
    for path in files {
        let shown = path.display().to_string();
        let text = match std::fs::read(path).map(String::from_utf8) {
            Ok(Ok(text)) => text,
            Ok(Err(_)) => {
                reporter.plain_error(&format!("cannot format `{shown}`: not valid UTF-8"));
                status = status.max(EXIT_INPUT);
                continue;
            }
            Err(e) => {
                reporter.plain_error(&format!("cannot read `{shown}`: {}", io_reason(e)));
                status = EXIT_USAGE;
                continue;
            }
        };
        let Some(formatted) = format_one(&mut reporter, &shown, &text) else {
            status = status.max(EXIT_INPUT);
            continue;
        };
        if formatted == text {
            continue;
        }
        if check {
            eprintln!("would reformat `{shown}`");
            status = status.max(EXIT_INPUT);
        } else if let Err(e) = std::fs::write(path, formatted) {
            reporter.plain_error(&format!("cannot write `{shown}`: {}", io_reason(e)));
            status = EXIT_USAGE;
        }
    }
    reporter.finish();
    status
}

fn format_one(reporter: &mut Reporter, name: &str, text: &str) -> Option<String> {
    match mpipe::fmt::format(text) {
        Ok(formatted) => Some(formatted),
        Err(e) => {
            let mut sources = SourceMap::default();
            sources.add(name, text);
            reporter.emit(&[e.to_diagnostic()], &sources);
            None
        }
    }
}
