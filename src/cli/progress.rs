//! A progress line for long work (sweep, tune) on stderr: drawn only when stderr is a
//! terminal and the work has run past a second, so short runs and pipes stay quiet.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

const AFTER: Duration = Duration::from_secs(1);
const WIDTH: usize = 30;

pub struct Progress {
    label: &'static str,
    started: Instant,
    terminal: bool,
    drawn: bool,
}

impl Progress {
    pub fn new(label: &'static str) -> Progress {
        Progress { label, started: Instant::now(), terminal: std::io::stderr().is_terminal(), drawn: false }
    }

    pub fn update(&mut self, done: usize, total: usize) {
        if !self.terminal || self.started.elapsed() < AFTER {
            return;
        }
        let filled = WIDTH * done.min(total) / total.max(1);
        eprint!("\r  {} [{}{}] {done}/{total}", self.label, "#".repeat(filled), " ".repeat(WIDTH - filled));
        self.drawn = true;
    }
}

impl Drop for Progress {
    /// Clears the line, so what is printed next starts at the left margin.
    fn drop(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
        }
    }
}
