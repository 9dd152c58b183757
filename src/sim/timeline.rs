//! Pictures of a simulated step: a Gantt chart (timeline.svg), a Chrome trace (timeline.json,
//! opens in Perfetto and chrome://tracing) and a compact terminal timeline. Both files are
//! written straight into the output as they are formatted.

use std::fmt::Write as _;
use std::io::{self, Write};

use serde::Serialize;

use crate::ir::interpret::Timeline;
use crate::ir::text::Shown;
use crate::ir::{Instr, Op, PlanIr};
use crate::picture::escape;

/// Region colours (ColorBrewer Paired): forward light, backward and backward_input dark,
/// backward_weight a third hue, so a zero-bubble plan's halves read apart.
const PALETTE: &[[&str; 3]] = &[
    ["#a6cee3", "#1f78b4", "#e31a1c"],
    ["#fdbf6f", "#ff7f00", "#b15928"],
    ["#b2df8a", "#33a02c", "#6a3d9a"],
    ["#cab2d6", "#6a3d9a", "#fb9a99"],
];

/// Above this many compute instructions timeline.svg draws bands, not one box each: a browser
/// opens it, and it stays under 2 MB at any size.
pub const DETAILED_BOXES: usize = 8_000;

/// Bands of the aggregated picture, all ranks together.
const BANDS: usize = 8_000;

const IDLE: &str = "#eeeeee";
/// The outline of the time the first body stage waits for its first features.
const SPILL: &str = "#d62728";

/// What a box is drawn as: its region's colour family, the op's shade, and the chunk of the
/// stage on its rank (interleaved and V schedules hold several).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kind {
    region: usize,
    shade: usize,
    chunk: usize,
}

impl Kind {
    fn fill(self) -> String {
        if self.chunk == 0 { self.colour().to_string() } else { format!("url(#{})", self.pattern()) }
    }

    fn colour(self) -> &'static str {
        PALETTE[self.region % PALETTE.len()][self.shade]
    }

    fn pattern(self) -> String {
        format!("k{}-{}-{}", self.region % PALETTE.len(), self.shade, self.chunk.min(3))
    }
}

fn shade(op: Op) -> usize {
    match op {
        Op::Forward => 0,
        Op::BackwardWeight => 2,
        _ => 1,
    }
}

/// Per stage: its region's index and its chunk, the stage's place among its region's stages on
/// the same rank.
fn stage_kinds(ir: &PlanIr) -> Vec<(usize, usize)> {
    let mut seen: std::collections::HashMap<(&str, Option<u32>), usize> = Default::default();
    ir.stages
        .iter()
        .map(|s| {
            let region = ir.regions.iter().position(|r| r.name == s.region).unwrap_or(0);
            let count = seen.entry((s.region.as_str(), s.rank)).or_default();
            *count += 1;
            (region, *count - 1)
        })
        .collect()
}

fn kind(kinds: &[(usize, usize)], i: &Instr) -> Kind {
    let (region, chunk) = kinds.get(i.stage.unwrap_or(0) as usize).copied().unwrap_or((0, 0));
    Kind { region, shade: shade(i.op), chunk }
}

fn label(op: Op) -> &'static str {
    match op {
        Op::Forward => "F",
        Op::Backward => "B",
        Op::BackwardInput => "I",
        Op::BackwardWeight => "W",
        _ => "",
    }
}

/// A round step for the time axis: 1, 2 or 5 times a power of ten, about eight to a step.
fn tick(span: f64) -> f64 {
    crate::picture::tick_step(span, 8.0, &[1.0, 2.0, 5.0])
}

fn seconds(t: f64) -> String {
    if t == 0.0 {
        "0".to_string()
    } else if t >= 1.0 {
        format!("{t:.2} s")
    } else if t >= 1e-3 {
        format!("{:.1} ms", t * 1e3)
    } else {
        format!("{:.0} µs", t * 1e6)
    }
}

/// Where a picture puts things.
struct Frame {
    step: f64,
    left: f64,
    top: f64,
    lane: f64,
    width: f64,
    /// Slices of a lane in the aggregated picture.
    slices: usize,
}

impl Frame {
    fn x(&self, t: f64) -> f64 {
        self.left + self.width * t / self.step
    }

    fn y(&self, rank: usize) -> f64 {
        self.top + rank as f64 * self.lane
    }
}

pub fn svg(ir: &PlanIr, timeline: &Timeline, title: &str) -> String {
    let mut out = Vec::new();
    write_svg(ir, timeline, title, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("the picture is UTF-8")
}

/// timeline.svg: one lane per rank on a grey (idle) background, a box per compute instruction,
/// or above [`DETAILED_BOXES`] bands of merged instructions.
pub fn write_svg(ir: &PlanIr, timeline: &Timeline, title: &str, out: &mut impl Write) -> io::Result<()> {
    let slices = (BANDS / ir.ranks.len().max(1)).clamp(16, 1000);
    let step = timeline.makespan().max(f64::MIN_POSITIVE);
    let f = Frame { step, left: 70.0, top: 50.0, lane: 22.0, width: 1000.0, slices };
    let kinds = stage_kinds(ir);
    let boxes: usize = ir.ranks.iter().map(|r| r.instructions.iter().filter(|i| i.op.is_compute()).count()).sum();
    let p = ir.ranks.len() as f64;
    let legend_y = f.top + p * f.lane + 40.0;
    let height = legend_y + 30.0;
    let full = f.left + f.width + 90.0;
    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{full}" height="{height}" viewBox="0 0 {full} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#
    )?;
    write_patterns(ir, &kinds, out)?;
    writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#)?;
    writeln!(out, r#"<text x="{}" y="20" font-size="14" font-weight="bold">{}</text>"#, f.left, escape(title))?;
    let how = if boxes > DETAILED_BOXES {
        format!(
            " · {boxes} compute instructions merged into bands of about {} each: hover a band for what it holds",
            seconds(f.step / f.slices as f64)
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        r##"<text x="{}" y="36" fill="#555">step {} · idle time is the grey background, its share at the right{how}</text>"##,
        f.left,
        seconds(f.step)
    )?;
    for (r, rank) in ir.ranks.iter().enumerate() {
        write_lane(&f, r, &rank.instructions, timeline, &kinds, boxes > DETAILED_BOXES, out)?;
    }
    let spill = write_spill(&f, ir, timeline, out)?;
    write_axis(&f, ir.ranks.len(), out)?;
    write_legend(ir, &kinds, spill, f.left, legend_y, out)?;
    out.write_all(b"</svg>\n")
}

/// With a replicated encoder: the time the first body stage waits for its first features,
/// outlined on its lane. It is what the encoder's work adds to the step in front of the
/// pipeline (its spill); whether it drew any.
fn write_spill(f: &Frame, ir: &PlanIr, timeline: &Timeline, out: &mut impl Write) -> io::Result<bool> {
    let Some(first) = ir.stages.iter().find(|s| s.rank.is_some()) else { return Ok(false) };
    let encoder = ir.stages.iter().any(|s| s.rank.is_none() && s.id < first.id);
    let rank = first.rank.unwrap_or(0) as usize;
    let forward = ir.ranks[rank].instructions.iter().position(|i| i.op == Op::Forward && i.stage == Some(first.id));
    let Some(wait) = forward.map(|k| timeline.start[rank][k]).filter(|w| encoder && *w > 0.0) else { return Ok(false) };
    writeln!(
        out,
        r#"<rect x="{}" y="{}" width="{:.2}" height="{}" fill="none" stroke="{SPILL}" stroke-width="2"><title>encoder spill: rank {rank}'s first body forward waits {} for its features</title></rect>"#,
        f.left,
        f.y(rank) - 1.0,
        f.width * wait / f.step,
        f.lane - 2.0,
        seconds(wait)
    )?;
    Ok(true)
}

/// One rank's lane: its grey background, its boxes or bands, and its idle share at the right.
fn write_lane(
    f: &Frame,
    r: usize,
    instructions: &[Instr],
    timeline: &Timeline,
    kinds: &[(usize, usize)],
    banded: bool,
    out: &mut impl Write,
) -> io::Result<()> {
    let (y, middle) = (f.y(r), f.y(r) + f.lane / 2.0 + 1.0);
    writeln!(out, r#"<rect x="{}" y="{y}" width="{}" height="{}" fill="{IDLE}"/>"#, f.left, f.width, f.lane - 4.0)?;
    writeln!(out, r#"<text x="{}" y="{middle}" text-anchor="end">rank {r}</text>"#, f.left - 8.0)?;
    let (start, end) = (&timeline.start[r], &timeline.end[r]);
    if banded {
        write_bands(f, r, instructions, start, end, kinds, out)?;
    } else {
        write_boxes(f, r, instructions, start, end, kinds, out)?;
    }
    let busy: f64 =
        instructions.iter().enumerate().filter(|(_, i)| i.op.is_compute()).map(|(k, _)| end[k] - start[k]).sum();
    let idle = 100.0 * (1.0 - busy / f.step).max(0.0);
    writeln!(out, r##"<text x="{}" y="{middle}" fill="#555">idle {idle:.0}%</text>"##, f.left + f.width + 6.0)
}

/// A hatch per chunk past the first: chunk 1 diagonal, chunk 2 crossed, chunk 3 dotted.
fn write_patterns(ir: &PlanIr, kinds: &[(usize, usize)], out: &mut impl Write) -> io::Result<()> {
    let mut used: Vec<Kind> = Vec::new();
    for i in ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.op.is_compute()) {
        let k = kind(kinds, i);
        if k.chunk > 0 && !used.iter().any(|u| u.pattern() == k.pattern()) {
            used.push(k);
        }
    }
    if used.is_empty() {
        return Ok(());
    }
    writeln!(out, "<defs>")?;
    for k in used {
        let marks = match k.chunk.min(3) {
            1 => r#"<path d="M0,6 L6,0" stroke="white" stroke-width="1.5"/>"#,
            2 => r#"<path d="M0,6 L6,0 M0,0 L6,6" stroke="white" stroke-width="1"/>"#,
            _ => r#"<circle cx="3" cy="3" r="1.2" fill="white"/>"#,
        };
        writeln!(
            out,
            r#"<pattern id="{}" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="{}"/>{marks}</pattern>"#,
            k.pattern(),
            k.colour()
        )?;
    }
    writeln!(out, "</defs>")
}

fn write_boxes(
    f: &Frame,
    r: usize,
    instructions: &[Instr],
    start: &[f64],
    end: &[f64],
    kinds: &[(usize, usize)],
    out: &mut impl Write,
) -> io::Result<()> {
    let (y, h) = (f.y(r), f.lane - 4.0);
    for (k, i) in instructions.iter().enumerate() {
        let (s, e) = (start[k], end[k]);
        if !i.op.is_compute() || e <= s {
            continue;
        }
        let w = (f.x(e) - f.x(s)).max(0.5);
        write!(
            out,
            r#"<rect x="{:.2}" y="{y}" width="{w:.2}" height="{h}" fill="{}" stroke="white" stroke-width="0.5"><title>{}: {} – {}</title></rect>"#,
            f.x(s),
            kind(kinds, i).fill(),
            escape(&Shown(i).to_string()),
            seconds(s),
            seconds(e)
        )?;
        if w > 14.0 {
            write!(
                out,
                r#"<text x="{:.2}" y="{}" text-anchor="middle" font-size="9">{}{}</text>"#,
                f.x(s) + w / 2.0,
                y + f.lane / 2.0 + 1.0,
                label(i.op),
                i.mb.unwrap_or(0)
            )?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// One slice of a rank's lane in the aggregated picture: how long each kind ran in it, and
/// how many instructions of each op it holds.
#[derive(Clone, Default)]
struct Slice {
    time: Vec<(Kind, f64)>,
    ops: [usize; 4],
}

impl Slice {
    fn add(&mut self, kind: Kind, t: f64) {
        match self.time.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, total)) => *total += t,
            None => self.time.push((kind, t)),
        }
    }

    /// The kind that ran longest, and the busy share in quarters (1 to 4), or `None` when idle.
    fn look(&self, width: f64) -> Option<(Kind, u32)> {
        let (kind, _) = self.time.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1))?;
        let busy: f64 = self.time.iter().map(|(_, t)| t).sum();
        Some((kind, ((4.0 * busy / width).round() as u32).clamp(1, 4)))
    }
}

/// Bands: the lane cut into equal slices of time, each drawn as the kind that ran longest in
/// it, as opaque as the slice was busy; neighbours that look alike become one band.
fn write_bands(
    f: &Frame,
    r: usize,
    instructions: &[Instr],
    start: &[f64],
    end: &[f64],
    kinds: &[(usize, usize)],
    out: &mut impl Write,
) -> io::Result<()> {
    let slices_per_rank = f.slices;
    let width = f.step / slices_per_rank as f64;
    let mut slices = vec![Slice::default(); slices_per_rank];
    for (k, i) in instructions.iter().enumerate() {
        if !i.op.is_compute() || end[k] <= start[k] {
            continue;
        }
        let kind = kind(kinds, i);
        let first = ((start[k] / width) as usize).min(slices_per_rank - 1);
        let last = ((end[k] / width) as usize).min(slices_per_rank - 1);
        slices[first].ops[[Op::Forward, Op::Backward, Op::BackwardInput, Op::BackwardWeight]
            .iter()
            .position(|&o| o == i.op)
            .unwrap_or(1)] += 1;
        for (c, slice) in slices.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (c as f64 * width, (c + 1) as f64 * width);
            slice.add(kind, end[k].min(hi) - start[k].max(lo));
        }
    }
    let (y, h) = (f.y(r), f.lane - 4.0);
    let mut c = 0;
    while c < slices.len() {
        let look = slices[c].look(width);
        let mut ops = slices[c].ops;
        let mut next = c + 1;
        while next < slices.len() && slices[next].look(width) == look {
            for (total, o) in ops.iter_mut().zip(slices[next].ops) {
                *total += o;
            }
            next += 1;
        }
        if let Some((kind, quarters)) = look {
            let names = ["forward", "backward", "backward_input", "backward_weight"];
            let held: Vec<String> =
                names.iter().zip(ops).filter(|(_, n)| *n > 0).map(|(name, n)| format!("{n} {name}")).collect();
            let (s, e) = (c as f64 * width, next as f64 * width);
            writeln!(
                out,
                r#"<rect x="{:.2}" y="{y}" width="{:.2}" height="{h}" fill="{}" fill-opacity="{}"><title>{}: {} – {}, busy {}%</title></rect>"#,
                f.x(s),
                f.x(e) - f.x(s),
                kind.fill(),
                f64::from(quarters) / 4.0,
                if held.is_empty() { "parts of longer instructions".to_string() } else { held.join(", ") },
                seconds(s),
                seconds(e),
                25 * quarters
            )?;
        }
        c = next;
    }
    Ok(())
}

fn write_axis(f: &Frame, ranks: usize, out: &mut impl Write) -> io::Result<()> {
    let axis_y = f.top + ranks as f64 * f.lane + 4.0;
    writeln!(out, r##"<line x1="{}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#333"/>"##, f.left, f.left + f.width)?;
    let dt = tick(f.step);
    let mut t = 0.0;
    while t <= f.step * 1.0001 {
        writeln!(
            out,
            r##"<line x1="{:.2}" y1="{axis_y}" x2="{:.2}" y2="{}" stroke="#333"/><text x="{:.2}" y="{}" text-anchor="middle">{}</text>"##,
            f.x(t),
            f.x(t),
            axis_y + 4.0,
            f.x(t),
            axis_y + 16.0,
            seconds(t)
        )?;
        t += dt;
    }
    Ok(())
}

/// One entry per kind the picture holds, naming the ops drawn in it, then a hatched sample of
/// each chunk past the first, then idle, then the encoder's spill where there is one.
fn write_legend(
    ir: &PlanIr,
    kinds: &[(usize, usize)],
    spill: bool,
    left: f64,
    y: f64,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut present: Vec<(Kind, Vec<Op>)> = Vec::new();
    let mut hatched: Vec<Kind> = Vec::new();
    for i in ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.op.is_compute()) {
        let k = kind(kinds, i);
        if k.chunk > 0 && !hatched.iter().any(|h| h.chunk.min(3) == k.chunk.min(3)) {
            hatched.push(k);
        }
        let k = Kind { chunk: 0, ..k };
        match present.iter_mut().find(|(p, _)| *p == k) {
            Some((_, ops)) if !ops.contains(&i.op) => ops.push(i.op),
            Some(_) => {}
            None => present.push((k, vec![i.op])),
        }
    }
    present.sort_by_key(|(k, _)| (k.region, k.shade));
    hatched.sort_by_key(|k| k.chunk);
    let mut entries: Vec<(String, String)> = present
        .into_iter()
        .map(|(k, mut ops)| {
            ops.sort();
            let names: Vec<&str> = ops.iter().map(|o| o.name()).collect();
            (k.colour().to_string(), format!("{} {}", ir.regions[k.region].name, names.join(" / ")))
        })
        .collect();
    let most = kinds.iter().map(|&(_, c)| c).max().unwrap_or(0);
    for k in hatched {
        let more = if k.chunk >= 3 && most > 3 { "+" } else { "" };
        entries.push((k.fill(), format!("chunk {}{more}", k.chunk.min(3))));
    }
    entries.push((IDLE.to_string(), "idle".to_string()));
    let mut x = left;
    writeln!(out, r#"<g id="legend" class="legend">"#)?;
    for (fill, text) in entries {
        writeln!(
            out,
            r#"<rect x="{x}" y="{y}" width="14" height="12" fill="{fill}"/><text x="{}" y="{}">{}</text>"#,
            x + 18.0,
            y + 10.0,
            escape(&text)
        )?;
        x += 30.0 + 6.0 * text.chars().count() as f64;
    }
    if spill {
        writeln!(
            out,
            r#"<rect x="{x}" y="{y}" width="14" height="12" fill="none" stroke="{SPILL}" stroke-width="2"/><text x="{}" y="{}">encoder spill</text>"#,
            x + 18.0,
            y + 10.0
        )?;
    }
    writeln!(out, "</g>")
}

/// A Chrome trace event; fields in name order, as the trace has always been written.
#[derive(Serialize)]
struct Event<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Args<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    name: &'a str,
    ph: &'static str,
    pid: u32,
    tid: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
}

#[derive(Serialize)]
enum Args<'a> {
    #[serde(rename = "name")]
    Name(&'a str),
    GiB(f64),
}

pub fn trace(ir: &PlanIr, timeline: &Timeline, memory: &[Vec<(f64, f64)>]) -> String {
    let mut out = Vec::new();
    write_trace(ir, timeline, memory, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("the trace is UTF-8")
}

/// Chrome trace event format: one complete event per compute instruction, one thread per rank,
/// and a memory counter per rank, each event serialised into `out` as it is made.
pub fn write_trace(
    ir: &PlanIr,
    timeline: &Timeline,
    memory: &[Vec<(f64, f64)>],
    out: &mut impl Write,
) -> io::Result<()> {
    out.write_all(br#"{"displayTimeUnit":"ms","traceEvents":["#)?;
    let mut first = true;
    // Names are formatted into one buffer, so serde_json escapes each at once.
    let mut name = String::new();
    for r in 0..ir.ranks.len() {
        let thread = format!("rank {r}");
        let args = Some(Args::Name(&thread));
        let e = Event { args, cat: None, dur: None, name: "thread_name", ph: "M", pid: 0, tid: r, ts: None };
        event(out, &mut first, &e)?;
    }
    for (r, rank) in ir.ranks.iter().enumerate() {
        for (k, i) in rank.instructions.iter().enumerate() {
            let (s, e) = (timeline.start[r][k], timeline.end[r][k]);
            let cat = i.stage.map_or("step", |st| ir.stage(st).region.as_str());
            // Receives that wait are idle time, not events; sends show only when they occupy the rank.
            let shown =
                i.op.is_compute() || matches!(i.op, Op::AllReduce | Op::OptimizerStep) || (i.op == Op::Send && e > s);
            if shown {
                let (ts, dur) = (Some(micros(s)), Some(micros(e - s)));
                name.clear();
                let _ = write!(name, "{}", Shown(i));
                let e = Event { args: None, cat: Some(cat), dur, name: &name, ph: "X", pid: 0, tid: r, ts };
                event(out, &mut first, &e)?;
            }
        }
        let counter = format!("memory rank {r}");
        for (t, bytes) in &memory[r] {
            let args = Some(Args::GiB(rounded(bytes / 1073741824.0, 1e6)));
            let e = Event { args, cat: None, dur: None, name: &counter, ph: "C", pid: 0, tid: r, ts: Some(micros(*t)) };
            event(out, &mut first, &e)?;
        }
    }
    out.write_all(b"]}\n")
}

/// `x` to the nearest 1 / `per`: the trace's numbers are written with the digits they mean, a
/// third shorter than a double's seventeen.
fn rounded(x: f64, per: f64) -> f64 {
    (x * per).round() / per
}

/// Seconds as the trace's microseconds, to the nanosecond.
fn micros(t: f64) -> f64 {
    rounded(t * 1e6, 1e3)
}

fn event(out: &mut impl Write, first: &mut bool, e: &impl Serialize) -> io::Result<()> {
    if !std::mem::take(first) {
        out.write_all(b",")?;
    }
    serde_json::to_writer(&mut *out, e).map_err(io::Error::from)
}

/// What [`ascii`] draws, for the line above it.
pub const ASCII_LEGEND: &str = "F forward, B backward, I/W backward input/weight (lower case: a rank's second or later chunk), e/g replicated (encoder) forward/backward, . idle";

/// One line per rank, `width` columns across the step: the op running at each column's
/// middle, as [`ASCII_LEGEND`] says.
pub fn ascii(ir: &PlanIr, timeline: &Timeline, width: usize) -> String {
    let step = timeline.makespan().max(f64::MIN_POSITIVE);
    let kinds = stage_kinds(ir);
    let mut out = String::new();
    for (r, rank) in ir.ranks.iter().enumerate() {
        let mut line = vec!['.'; width];
        for (k, i) in rank.instructions.iter().enumerate() {
            if !i.op.is_compute() {
                continue;
            }
            let replicated = i.stage.is_some_and(|s| ir.stage(s).rank.is_none());
            let c = match (i.op, replicated) {
                (Op::Forward, true) => 'e',
                (_, true) => 'g',
                (op, false) => {
                    let c = label(op).chars().next().unwrap_or('?');
                    if kind(&kinds, i).chunk > 0 { c.to_ascii_lowercase() } else { c }
                }
            };
            let (s, e) = (timeline.start[r][k], timeline.end[r][k]);
            for (col, cell) in line.iter_mut().enumerate() {
                let t = (col as f64 + 0.5) * step / width as f64;
                if t >= s && t < e {
                    *cell = c;
                }
            }
        }
        let _ = writeln!(out, "  {r:>3} |{}|", line.into_iter().collect::<String>());
    }
    out
}
