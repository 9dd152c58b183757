//! `mpipec explain CODE`, `mpipec explain --list`

use mpipe::diagnostics::Code;
use mpipe::suggest::did_you_mean;

use super::EXIT_USAGE;

pub fn run(code: Option<&str>, list: bool) -> u8 {
    match code {
        Some(code) if !list => explain(code),
        _ => {
            for c in Code::ALL {
                println!("{}  {}", c.as_str(), c.summary());
            }
            0
        }
    }
}

fn explain(code: &str) -> u8 {
    match Code::parse(code) {
        Some(c) => {
            print!("{}", c.explain());
            0
        }
        None => {
            eprintln!("error: unknown diagnostic code `{code}`");
            let upper = code.trim().to_ascii_uppercase();
            if let Some(s) = did_you_mean(&upper, Code::ALL.iter().map(|c| c.as_str())) {
                eprintln!("help: did you mean `{s}`?");
            } else {
                eprintln!("help: codes look like `E0001`; `mpipec explain --list` lists them all");
            }
            EXIT_USAGE
        }
    }
}
