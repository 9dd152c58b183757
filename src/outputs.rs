//! The files of a build's output directory, for a built and evaluated plan. Each file is a
//! writer the CLI streams into place (atomically); nothing here touches the file system.

use std::io::{self, BufWriter, Write};

use crate::built::Built;
use crate::ir::{compact, csv, text};
use crate::sim::timeline;

/// One output file: its path relative to the output directory, and its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    pub path: String,
    pub contents: String,
}

/// Which encoding of the IR a build writes: plan.json (an object per instruction), or
/// plan.compact.json (a token per instruction, docs/plan-formats.md). `Auto` writes plan.json
/// up to [`COMPACT_ABOVE`] instructions and the compact plan above, where plan.json would be
/// hundreds of megabytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanFormat {
    Readable,
    Compact,
    Auto,
}

pub const COMPACT_ABOVE: usize = 200_000;

pub const READABLE_PLAN: &str = "plan.json";
pub const COMPACT_PLAN: &str = "plan.compact.json";

pub fn instructions(ir: &crate::ir::PlanIr) -> usize {
    ir.ranks.iter().map(|r| r.instructions.len()).sum()
}

impl PlanFormat {
    /// The file this format writes for `ir`.
    pub fn file(self, ir: &crate::ir::PlanIr) -> &'static str {
        match self {
            PlanFormat::Readable => READABLE_PLAN,
            PlanFormat::Compact => COMPACT_PLAN,
            PlanFormat::Auto if instructions(ir) > COMPACT_ABOVE => COMPACT_PLAN,
            PlanFormat::Auto => READABLE_PLAN,
        }
    }
}

/// The buffer every output is written through; the writers format into it directly.
pub type Sink<'w> = BufWriter<&'w mut dyn Write>;

type Writer<'a> = Box<dyn for<'w> Fn(&mut Sink<'w>) -> io::Result<()> + Send + Sync + 'a>;

/// One output file: its path relative to the output directory and the writer of its bytes,
/// which formats from the compiler's own data as it goes, so a plan of a million instructions
/// is never held whole in memory as text.
pub struct Output<'a> {
    pub path: String,
    write: Writer<'a>,
}

impl<'a> Output<'a> {
    fn new(path: &str, write: impl for<'w> Fn(&mut Sink<'w>) -> io::Result<()> + Send + Sync + 'a) -> Output<'a> {
        Output { path: path.into(), write: Box::new(write) }
    }

    pub fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut sink = BufWriter::with_capacity(1 << 16, out);
        (self.write)(&mut sink)?;
        sink.flush()
    }
}

impl<'a> From<Artifact> for Output<'a> {
    fn from(a: Artifact) -> Output<'a> {
        Output::new(&a.path.clone(), move |w| w.write_all(a.contents.as_bytes()))
    }
}

/// How many bytes each output of [`outputs`] writes, formatted into nothing: what a larger
/// build of the same plan is estimated from before it is written.
pub fn sizes(built: &Built, format: PlanFormat) -> Vec<(String, u64)> {
    outputs(built, format)
        .iter()
        .map(|o| {
            let mut counter = Counter(0);
            o.write_to(&mut counter).expect("counting cannot fail");
            (o.path.clone(), counter.0)
        })
        .collect()
}

/// A writer that keeps only the number of bytes it was given.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Every output of a build but the backends'.
pub fn outputs<'a>(built: &'a Built, format: PlanFormat) -> Vec<Output<'a>> {
    let ir = &built.derived.ir;
    let choices = built.resolved.describe();
    let simulation = built.evaluate();
    let mut report = serde_json::to_string_pretty(&simulation.report).expect("the report serialises");
    report.push('\n');
    let plan = match format.file(ir) {
        COMPACT_PLAN => Output::new(COMPACT_PLAN, move |w| compact::write(ir, w)),
        _ => Output::new(READABLE_PLAN, move |w| ir.write_json(w)),
    };
    let mut out = vec![
        plan,
        Output::new("plan.txt", move |w| text::write_with_choices(ir, &choices, w)),
        Artifact { path: "report.json".into(), contents: report }.into(),
        Output::new("timeline.json", move |w| timeline::write_trace(ir, &simulation.timeline, &simulation.memory, w)),
        Output::new("timeline.svg", move |w| timeline::write_svg(ir, &simulation.timeline, &ir.source, w)),
    ];
    if ir.all_sharded() {
        out.push(Output::new("schedule.csv", move |w| csv::write(ir, w)));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
