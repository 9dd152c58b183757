//! What building or simulating a large plan will cost, found before it starts. The plan is
//! built twice at a few microbatches (the pilots), each output formatted into nothing and
//! counted, and the line through the two is read at the plan's microbatch count: derive,
//! simulate and every output grow linearly with it. Past [`NOTICE_AFTER_S`] seconds or
//! [`NOTICE_ABOVE`] bytes the command says so before it starts, and shows its progress on a
//! terminal; a build that would write more than [`LARGE_OUTPUT`] bytes needs `--large-output`.

use std::time::Instant;

use mpipe::outputs::{self, COMPACT_ABOVE, COMPACT_PLAN, PlanFormat, READABLE_PLAN};
use mpipe::plan::Plan;

use super::Global;
use super::check::Source;

/// Plans of fewer microbatches are not estimated: the pilots would cost too large a share.
pub const PILOT_FROM: u64 = 512;
/// Expected seconds past which a command says up front how long it will take.
pub const NOTICE_AFTER_S: f64 = 10.0;
/// Bytes past which `build` says up front how much it will write: 64 MB.
pub const NOTICE_ABOVE: f64 = 64e6;
/// Bytes past which `build` writes nothing without `--large-output`: 256 MB.
pub const LARGE_OUTPUT: f64 = 256e6;
/// timeline.svg draws bands above 8 000 compute instructions and stays under this at any size.
const SVG_AT_MOST: f64 = 2e6;

pub struct Estimate {
    pub microbatches: u64,
    pub instructions: f64,
    pub seconds: f64,
    /// Each output and its bytes, largest first; empty when nothing is written.
    pub files: Vec<(String, f64)>,
}

/// One pilot build: its instructions, the seconds it took and the bytes of each output.
struct Pilot {
    instructions: f64,
    seconds: f64,
    files: Vec<(String, f64)>,
}

/// The cost of `plan` (checked from `source`), or `None` for a plan too small to need one, or
/// one whose pilots do not check (a list with an entry per microbatch, say). `format` is the
/// plan format written; `None` when nothing is written (`sim`).
pub fn estimate(global: &Global, source: &Source, plan: &Plan, format: Option<PlanFormat>) -> Option<Estimate> {
    let (m, p) = (plan.batch.microbatches, plan.cluster.pp.max(1));
    // Past the pipeline's fill, where the work per microbatch is what it is at any count.
    let m0 = 32u64.max(4 * p).div_ceil(p) * p;
    if m < PILOT_FROM || 8 * m0 > m {
        return None;
    }
    let (a, b) = (pilot(global, source, m0, format)?, pilot(global, source, 2 * m0, format)?);
    let at = |x: f64, y: f64| (x + (y - x) * (m - m0) as f64 / m0 as f64).max(y);
    let instructions = at(a.instructions, b.instructions);
    let compact = match format {
        Some(PlanFormat::Auto) => instructions > COMPACT_ABOVE as f64,
        f => f == Some(PlanFormat::Compact),
    };
    let mut files: Vec<(String, f64)> = a
        .files
        .iter()
        .zip(&b.files)
        .filter(|((path, _), _)| path != if compact { READABLE_PLAN } else { COMPACT_PLAN })
        .map(|((path, x), (_, y))| {
            let bytes = at(*x, *y);
            (path.clone(), if path == "timeline.svg" { bytes.min(SVG_AT_MOST) } else { bytes })
        })
        .collect();
    files.sort_by(|x, y| y.1.total_cmp(&x.1));
    Some(Estimate { microbatches: m, instructions, seconds: at(a.seconds, b.seconds), files })
}

fn pilot(global: &Global, source: &Source, m: u64, format: Option<PlanFormat>) -> Option<Pilot> {
    let started = Instant::now();
    let plan = source.check(global, &[("batch.microbatches".into(), m.to_string())]).plan?;
    let built = mpipe::driver::build(&plan).ok()?;
    built.evaluate();
    let mut files = Vec::new();
    if format.is_some() {
        // Both plan formats: which one `auto` writes depends on the size being estimated.
        files = outputs::sizes(&built, PlanFormat::Readable);
    }
    let seconds = started.elapsed().as_secs_f64();
    if format.is_some() {
        let compact = outputs::sizes(&built, PlanFormat::Compact).into_iter().find(|(path, _)| path == COMPACT_PLAN);
        files.extend(compact);
        files.sort();
    }
    let files = files.into_iter().map(|(path, bytes)| (path, bytes as f64)).collect();
    Some(Pilot { instructions: outputs::instructions(&built.derived.ir) as f64, seconds, files })
}

impl Estimate {
    pub fn bytes(&self) -> f64 {
        self.files.iter().map(|f| f.1).sum()
    }

    /// Whether the command should say what it is about to spend.
    pub fn worth_a_notice(&self) -> bool {
        self.seconds > NOTICE_AFTER_S || self.bytes() > NOTICE_ABOVE
    }

    /// `note: …`: the plan's size, the time it will take here and, when it writes, how much.
    pub fn notice(&self, doing: &str) -> String {
        let mut line = format!(
            "note: this plan has about {} instructions ({} microbatches); {doing} it takes about {}",
            millions(self.instructions),
            self.microbatches,
            duration(self.seconds)
        );
        if !self.files.is_empty() {
            let largest: Vec<String> =
                self.files.iter().take(2).map(|(path, bytes)| format!("{path} {}", megabytes(*bytes))).collect();
            line.push_str(&format!(" and writes about {} ({}, …)", megabytes(self.bytes()), largest.join(", ")));
        }
        line
    }

    /// The refusal of a build past [`LARGE_OUTPUT`] without `--large-output`, if it is one.
    pub fn refusal(&self) -> Option<String> {
        (self.bytes() > LARGE_OUTPUT).then(|| {
            format!(
                "this build would write about {}, more than {}; nothing was written\nhelp: pass `--large-output` to write it, or `mpipec sim` the plan to see its step without the files",
                megabytes(self.bytes()),
                megabytes(LARGE_OUTPUT)
            )
        })
    }
}

fn millions(n: f64) -> String {
    if n >= 1e6 { format!("{:.1} million", n / 1e6) } else { format!("{:.0} thousand", n / 1e3) }
}

fn megabytes(bytes: f64) -> String {
    format!("{:.0} MB", bytes / 1e6)
}

pub fn duration(seconds: f64) -> String {
    if seconds >= 120.0 { format!("{:.0} min", seconds / 60.0) } else { format!("{seconds:.0} s") }
}
