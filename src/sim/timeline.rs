//! Pictures of a simulated step: a Gantt chart (timeline.svg), a Chrome trace (timeline.json,
//! opens in Perfetto and chrome://tracing) and a compact terminal timeline.

use std::fmt::Write;

use crate::ir::interpret::Timeline;
use crate::ir::{Op, PlanIr};

/// Region colours, light for forward and dark for backward (ColorBrewer Paired).
const PALETTE: &[(&str, &str)] =
    &[("#a6cee3", "#1f78b4"), ("#fdbf6f", "#ff7f00"), ("#b2df8a", "#33a02c"), ("#cab2d6", "#6a3d9a")];

fn region_index(ir: &PlanIr, stage: u32) -> usize {
    let name = &ir.stage(stage).region;
    ir.regions.iter().position(|r| &r.name == name).unwrap_or(0)
}

fn colour(ir: &PlanIr, stage: u32, op: Op) -> &'static str {
    let (light, dark) = PALETTE[region_index(ir, stage) % PALETTE.len()];
    if op == Op::Forward { light } else { dark }
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

/// A round step for the time axis: 1, 2 or 5 times a power of ten.
fn tick(span: f64) -> f64 {
    let raw = span / 8.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|t| *t >= raw).unwrap_or(10.0 * p)
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

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn svg(ir: &PlanIr, timeline: &Timeline, title: &str) -> String {
    let step = timeline.makespan().max(f64::MIN_POSITIVE);
    let (left, top, lane, width) = (70.0, 50.0, 22.0, 1000.0);
    let p = ir.ranks.len() as f64;
    let legend_y = top + p * lane + 40.0;
    let height = legend_y + 30.0;
    let x = |t: f64| left + width * t / step;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" viewBox="0 0 {} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#,
        left + width + 20.0,
        left + width + 20.0
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{left}" y="20" font-size="14" font-weight="bold">{}</text>"#, escape(title));
    let _ = writeln!(
        out,
        r##"<text x="{left}" y="36" fill="#555">step {} · idle time is the grey background</text>"##,
        seconds(step)
    );
    for (r, rank) in ir.ranks.iter().enumerate() {
        let y = top + r as f64 * lane;
        let _ = writeln!(out, r##"<rect x="{left}" y="{y}" width="{width}" height="{}" fill="#eeeeee"/>"##, lane - 4.0);
        let _ =
            writeln!(out, r#"<text x="{}" y="{}" text-anchor="end">rank {r}</text>"#, left - 8.0, y + lane / 2.0 + 1.0);
        for (k, i) in rank.instructions.iter().enumerate() {
            if !i.op.is_compute() {
                continue;
            }
            let (s, e) = (timeline.start[r][k], timeline.end[r][k]);
            if e <= s {
                continue;
            }
            let stage = i.stage.unwrap_or(0);
            let w = (x(e) - x(s)).max(0.5);
            let tip = format!("{} s{} mb{}: {} – {}", i.op.name(), stage, i.mb.unwrap_or(0), seconds(s), seconds(e));
            let _ = write!(
                out,
                r##"<rect x="{:.2}" y="{y}" width="{w:.2}" height="{}" fill="{}" stroke="white" stroke-width="0.5"><title>{}</title></rect>"##,
                x(s),
                lane - 4.0,
                colour(ir, stage, i.op),
                escape(&tip)
            );
            if w > 14.0 {
                let _ = write!(
                    out,
                    r#"<text x="{:.2}" y="{}" text-anchor="middle" font-size="9">{}{}</text>"#,
                    x(s) + w / 2.0,
                    y + lane / 2.0 + 1.0,
                    label(i.op),
                    i.mb.unwrap_or(0)
                );
            }
            out.push('\n');
        }
    }
    let axis_y = top + p * lane + 4.0;
    let _ = writeln!(out, r##"<line x1="{left}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#333"/>"##, left + width);
    let dt = tick(step);
    let mut t = 0.0;
    while t <= step * 1.0001 {
        let _ = writeln!(
            out,
            r##"<line x1="{:.2}" y1="{axis_y}" x2="{:.2}" y2="{}" stroke="#333"/><text x="{:.2}" y="{}" text-anchor="middle">{}</text>"##,
            x(t),
            x(t),
            axis_y + 4.0,
            x(t),
            axis_y + 16.0,
            seconds(t)
        );
        t += dt;
    }
    let mut lx = left;
    for (g, region) in ir.regions.iter().enumerate() {
        let (light, dark) = PALETTE[g % PALETTE.len()];
        let parts: &[(&str, &str)] =
            if region.backward { &[(light, "forward"), (dark, "backward")] } else { &[(light, "forward")] };
        for &(fill, what) in parts {
            let _ = writeln!(
                out,
                r#"<rect x="{lx}" y="{legend_y}" width="14" height="12" fill="{fill}"/><text x="{}" y="{}">{} {what}</text>"#,
                lx + 18.0,
                legend_y + 10.0,
                escape(&region.name)
            );
            lx += 30.0 + 7.0 * (region.name.len() + what.len()) as f64;
        }
    }
    out.push_str("</svg>\n");
    out
}

/// Chrome trace event format: one complete event per compute instruction, one thread per rank,
/// and a memory counter per rank.
pub fn trace(ir: &PlanIr, timeline: &Timeline, memory: &[Vec<(f64, f64)>]) -> String {
    let mut events = Vec::new();
    for r in 0..ir.ranks.len() {
        events.push(serde_json::json!({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": format!("rank {r}")}}));
    }
    for (r, rank) in ir.ranks.iter().enumerate() {
        for (k, i) in rank.instructions.iter().enumerate() {
            let (s, e) = (timeline.start[r][k], timeline.end[r][k]);
            let name = super::super::ir::text::instr(i);
            let category = i.stage.map(|st| ir.stage(st).region.clone()).unwrap_or_else(|| "step".into());
            // Receives that wait are idle time, not events; sends show only when they occupy the rank.
            let shown =
                i.op.is_compute() || matches!(i.op, Op::AllReduce | Op::OptimizerStep) || (i.op == Op::Send && e > s);
            if shown {
                events.push(serde_json::json!({"name": name, "cat": category, "ph": "X", "ts": s * 1e6, "dur": (e - s) * 1e6, "pid": 0, "tid": r}));
            }
        }
        for (t, bytes) in &memory[r] {
            events.push(serde_json::json!({"name": format!("memory rank {r}"), "ph": "C", "ts": t * 1e6, "pid": 0, "tid": r, "args": {"GiB": bytes / 1073741824.0}}));
        }
    }
    let mut s = serde_json::to_string(&serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"}))
        .expect("serialises");
    s.push('\n');
    s
}

/// One line per rank, `width` columns across the step: the op running at each column's
/// middle (`F`/`B`/`I`/`W` for the body, `e`/`b` for a replicated region), `.` when idle.
pub fn ascii(ir: &PlanIr, timeline: &Timeline, width: usize) -> String {
    let step = timeline.makespan().max(f64::MIN_POSITIVE);
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
                (_, true) => 'b',
                (op, false) => label(op).chars().next().unwrap_or('?'),
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
