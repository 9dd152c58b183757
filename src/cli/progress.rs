//! A progress line for long work on stderr: drawn only when stderr is a terminal and the
//! work has run past a second, so short runs and pipes stay quiet. [`Progress`] counts steps
//! (sweep, tune); [`Ticker`] times one long call (building a large plan) against its estimate.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

    /// [`Progress::update`] under another label: the work moved to its next phase, whose
    /// total is its own.
    pub fn update_phase(&mut self, label: &'static str, done: usize, total: usize) {
        self.label = label;
        self.update(done, total);
    }

    pub fn update(&mut self, done: usize, total: usize) {
        if !self.terminal || self.started.elapsed() < AFTER {
            return;
        }
        let filled = WIDTH * done.min(total) / total.max(1);
        eprint!("\r\x1b[2K  {} [{}{}] {done}/{total}", self.label, "#".repeat(filled), " ".repeat(WIDTH - filled));
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

/// A line that redraws itself from its own thread while the caller works: the stage, the
/// time spent, and a bar of it against the time expected.
pub struct Ticker {
    stage: Arc<Mutex<&'static str>>,
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// A ticker that draws nothing: for work too short to need one.
    pub fn idle() -> Ticker {
        Ticker { stage: Arc::new(Mutex::new("")), done: Arc::new(AtomicBool::new(true)), thread: None }
    }

    pub fn start(stage: &'static str, expected_s: f64) -> Ticker {
        let stage = Arc::new(Mutex::new(stage));
        let done = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let (stage, done) = (Arc::clone(&stage), Arc::clone(&done));
            std::thread::spawn(move || tick(&stage, &done, expected_s))
        });
        Ticker { stage, done, thread }
    }

    pub fn stage(&self, stage: &'static str) {
        *self.stage.lock().unwrap_or_else(|e| e.into_inner()) = stage;
    }

    /// Runs `print` with the line cleared and not redrawn meanwhile, so what it prints (the
    /// diagnostics) does not run into the bar.
    pub fn aside(&self, print: impl FnOnce()) {
        let _held = self.stage.lock().unwrap_or_else(|e| e.into_inner());
        if self.thread.is_some() {
            eprint!("\r\x1b[2K");
        }
        print();
    }
}

fn tick(stage: &Mutex<&'static str>, done: &AtomicBool, expected_s: f64) {
    let started = Instant::now();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let spent = started.elapsed().as_secs_f64();
        let filled = ((WIDTH as f64 * spent / expected_s.max(1e-3)) as usize).min(WIDTH);
        let label = stage.lock().unwrap_or_else(|e| e.into_inner());
        eprint!(
            "\r\x1b[2K  {label} [{}{}] {} of about {}",
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            super::estimate::duration(spent),
            super::estimate::duration(expected_s)
        );
        drop(label);
    }
    eprint!("\r\x1b[2K");
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
