//! `mpipec sweep`: one plan under a range of values of one or more keys (as in `--set`),
//! each point checked, derived and simulated — the paper's own falsifier: raise the image
//! tokens until encoder work exceeds the warmup slack and see where transpose stops paying.

use std::fmt::Write;

use serde::Serialize;

use crate::sim::report::Report;

/// A key and the values it takes: `KEY=A..B*F` (geometric, factor F), `KEY=A..B+S` (step S),
/// `KEY=A..B` (step 1) or `KEY=a,b,c`.
#[derive(Clone, Debug, PartialEq)]
pub struct Vary {
    pub key: String,
    pub values: Vec<String>,
}

/// Points past which a sweep is refused: each one is a whole derive and simulation.
pub const MAX_POINTS: usize = 4096;

pub fn parse_vary(arg: &str) -> Result<Vary, String> {
    let (key, range) = arg
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=RANGE, such as `batch.image_tokens=1024..65536*2`, found `{arg}`"))?;
    let (key, range) = (key.trim(), range.trim());
    let values = if let Some((a, rest)) = range.split_once("..") {
        let (b, step) = match rest.find(['*', '+']) {
            Some(i) => (&rest[..i], Some((&rest[i..i + 1], &rest[i + 1..]))),
            None => (rest, None),
        };
        let num = |s: &str| number(s).map_err(|e| format!("`{s}` in `{arg}` is not a number{e}"));
        let (a, b) = (num(a)?, num(b)?);
        let mut out = Vec::new();
        let mut x = a;
        let (geometric, by) = match step {
            Some(("*", f)) => (true, num(f)?),
            Some((_, s)) => (false, num(s)?),
            None => (false, 1.0),
        };
        if (geometric && by <= 1.0) || (!geometric && by <= 0.0) || b < a {
            return Err(format!("the range `{range}` never reaches its end"));
        }
        while x <= b * (1.0 + 1e-12) {
            out.push(if x.fract() == 0.0 { format!("{x:.0}") } else { format!("{x}") });
            if out.len() > MAX_POINTS {
                return Err(format!("`{arg}` has more than {MAX_POINTS} values"));
            }
            x = if geometric { x * by } else { x + by };
        }
        out
    } else {
        range.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
    };
    if key.is_empty() || values.is_empty() {
        return Err(format!("`{arg}` names no key or no values"));
    }
    Ok(Vary { key: key.to_string(), values })
}

/// A bound or step of a range, read as the language reads numbers (`_` may group digits);
/// the error says how to write a count given with a magnitude suffix (`8k`).
fn number(text: &str) -> Result<f64, String> {
    let text = text.trim();
    if let Ok(x) = text.replace('_', "").parse::<f64>() {
        return Ok(x);
    }
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let readings = digits.parse::<f64>().ok().zip(crate::units::magnitude(&text[digits.len()..]));
    Err(match readings {
        Some((x, (decimal, binary))) if decimal != binary => {
            format!(": write it in full, `{}` or `{}`", x * binary, x * decimal)
        }
        Some((x, (factor, _))) => format!(": write it in full, `{}`", x * factor),
        None => String::new(),
    })
}

/// Every combination of the varied values, first key slowest. The size is the product of the
/// value counts, so a sweep past [`MAX_POINTS`] is refused before any point is made.
pub fn grid(varies: &[Vary]) -> Result<Vec<Vec<(String, String)>>, String> {
    let sizes: Vec<usize> = varies.iter().map(|v| v.values.len()).collect();
    let size = sizes.iter().try_fold(1usize, |n, k| n.checked_mul(*k)).filter(|n| *n <= MAX_POINTS);
    if size.is_none() {
        let product: Vec<String> = sizes.iter().map(usize::to_string).collect();
        let total = sizes.iter().map(|k| *k as f64).product::<f64>();
        return Err(format!(
            "the sweep has {total:.0} points ({}), more than {MAX_POINTS}\nhelp: use fewer values, or a coarser step (`+` or `*`) in a range",
            product.join(" × ")
        ));
    }
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for v in varies {
        points = points
            .into_iter()
            .flat_map(|p| v.values.iter().map(move |x| [p.clone(), vec![(v.key.clone(), x.clone())]].concat()))
            .collect();
    }
    Ok(points)
}

#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The first varied key's value at this point (what the plot's x axis shows).
    pub value: String,
    /// Every varied key and its value at this point.
    pub values: Vec<(String, String)>,
    /// The plan's report, or why this point is not a valid plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Point {
    pub fn spills(&self) -> bool {
        self.report.as_ref().is_some_and(|r| r.ranks.iter().any(|x| x.spill_s > 0.0))
    }

    pub fn fits(&self) -> bool {
        self.report.as_ref().is_some_and(|r| r.over_memory.is_empty())
    }
}

/// A line plot of step time against the first varied value, one line per combination of the
/// others, a dashed line per baseline, filled markers where some rank spills and crosses
/// where memory no longer fits.
pub fn svg(points: &[Point], title: &str) -> String {
    let xs: Vec<f64> = points.iter().filter_map(x_of).collect();
    let lines = Lines::of(points);
    let frame = Frame::new(&xs, lines.highest());
    let key = points.first().and_then(|p| p.values.first()).map(|(k, _)| k.clone()).unwrap_or_default();
    let mut out = String::new();
    frame.axes(&mut out, title, &xs, &key);
    out.push_str("<g id=\"legend\" class=\"legend\">\n");
    let mut legend = Legend { x: frame.left + frame.w + 20.0, y: frame.top };
    for (i, (name, marks)) in lines.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        frame.polyline(&mut out, colour, "2", "", marks.iter().map(|m| (m.x, m.y)));
        for mark in marks {
            frame.marker(&mut out, colour, mark);
        }
        legend.entry(&mut out, colour, "", name);
    }
    for (i, (name, pts)) in lines.baselines.iter().enumerate() {
        let colour = COLOURS[(i + lines.series.len()) % COLOURS.len()];
        frame.polyline(&mut out, colour, "1.5", "5,3", pts.iter().copied());
        legend.entry(&mut out, colour, "5,3", name);
    }
    legend.markers(&mut out);
    out.push_str("</g>\n</svg>\n");
    out
}

const COLOURS: [&str; 6] = ["#1f78b4", "#e31a1c", "#33a02c", "#6a3d9a", "#ff7f00", "#b15928"];

/// A point's place on the x axis: its first varied value, when that is a number.
fn x_of(p: &Point) -> Option<f64> {
    p.values.first().and_then(|(_, v)| v.parse::<f64>().ok())
}

/// One point of a plan's line: x, step time, whether some rank spills, whether memory fits.
struct Mark {
    x: f64,
    y: f64,
    spills: bool,
    fits: bool,
}

/// What the plot draws: a line per combination of the keys after the first, and, when only
/// one key varies, a line per baseline the plan was compared with.
struct Lines {
    series: Vec<(String, Vec<Mark>)>,
    baselines: Vec<(String, Vec<(f64, f64)>)>,
}

impl Lines {
    fn of(points: &[Point]) -> Lines {
        let mut lines = Lines { series: Vec::new(), baselines: Vec::new() };
        for p in points {
            let (Some(x), Some(r)) = (x_of(p), &p.report) else { continue };
            let rest: Vec<String> = p.values.iter().skip(1).map(|(k, v)| format!("{k}={v}")).collect();
            let name = if rest.is_empty() { "this plan".to_string() } else { rest.join(", ") };
            let mark = Mark { x, y: r.step_time_s, spills: p.spills(), fits: p.fits() };
            push_to(&mut lines.series, name, mark);
            if p.values.len() == 1 {
                for c in &r.compare {
                    push_to(&mut lines.baselines, c.name.clone(), (x, c.step_time_s));
                }
            }
        }
        lines
    }

    /// The longest step time drawn, which the y axis must reach.
    fn highest(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|(_, s)| s.iter().map(|m| m.y))
            .chain(self.baselines.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)))
            .fold(0.0, f64::max)
    }
}

/// Appends to the named line, starting it if it is new; lines keep the order they first appear.
fn push_to<T>(lines: &mut Vec<(String, Vec<T>)>, name: String, item: T) {
    match lines.iter_mut().find(|(n, _)| *n == name) {
        Some((_, s)) => s.push(item),
        None => lines.push((name, vec![item])),
    }
}

/// The plot area and how values map into it. The x axis is logarithmic when the values grow
/// by one constant factor (a `*` range), so its points are evenly spaced.
struct Frame {
    left: f64,
    top: f64,
    w: f64,
    h: f64,
    geometric: bool,
    x0: f64,
    x1: f64,
    step: f64,
    ticks: usize,
    ymax: f64,
}

impl Frame {
    fn new(xs: &[f64], highest: f64) -> Frame {
        let geometric = xs.iter().all(|x| *x > 0.0) && xs.len() > 2 && {
            let r: Vec<f64> = xs.windows(2).filter(|w| w[0] != w[1]).map(|w| w[1] / w[0]).collect();
            !r.is_empty() && r.iter().all(|q| (q - r[0]).abs() < 1e-6 && *q > 1.0)
        };
        let fx = |x: f64| if geometric { x.ln() } else { x };
        let (x0, x1) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(fx(*x)), b.max(fx(*x))));
        let step = tick_step(highest * 1.02);
        let ticks = (highest * 1.02 / step).ceil().max(1.0) as usize;
        Frame { left: 80.0, top: 50.0, w: 720.0, h: 360.0, geometric, x0, x1, step, ticks, ymax: step * ticks as f64 }
    }

    fn px(&self, x: f64) -> f64 {
        let fx = if self.geometric { x.ln() } else { x };
        self.left + if self.x1 > self.x0 { self.w * (fx - self.x0) / (self.x1 - self.x0) } else { self.w / 2.0 }
    }

    fn py(&self, y: f64) -> f64 {
        self.top + self.h - if self.ymax > 0.0 { self.h * y / self.ymax } else { 0.0 }
    }

    /// The document's head, the title, both axes with their ticks and their titles.
    fn axes(&self, out: &mut String, title: &str, xs: &[f64], key: &str) {
        let (left, top, w, h) = (self.left, self.top, self.w, self.h);
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#,
            left + w + 230.0,
            top + h + 60.0
        );
        let _ = writeln!(
            out,
            r#"<rect width="100%" height="100%" fill="white"/><text x="{left}" y="22" font-size="14" font-weight="bold">{}</text>"#,
            crate::picture::escape(title)
        );
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/>"##,
            top + h,
            left + w,
            top + h,
            top + h
        );
        self.y_ticks(out);
        self.x_ticks(out, xs);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{key}{}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">step time (s)</text>"#,
            left + w / 2.0,
            top + h + 36.0,
            match (unit_of(key), self.geometric) {
                (Some(unit), true) => format!(" ({unit}, log scale)"),
                (Some(unit), false) => format!(" ({unit})"),
                (None, true) => " (log scale)".to_string(),
                (None, false) => String::new(),
            },
            top + h / 2.0,
            top + h / 2.0
        );
    }

    fn y_ticks(&self, out: &mut String) {
        let left = self.left;
        for k in 0..=self.ticks {
            let y = self.step * k as f64;
            let _ = writeln!(
                out,
                r##"<line x1="{}" y1="{:.1}" x2="{left}" y2="{:.1}" stroke="#333"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                left - 4.0,
                self.py(y),
                self.py(y),
                left - 8.0,
                self.py(y) + 4.0,
                tick_label(y, self.step)
            );
        }
    }

    /// A tick at each distinct value swept.
    fn x_ticks(&self, out: &mut String, xs: &[f64]) {
        let bottom = self.top + self.h;
        let mut seen: Vec<f64> = Vec::new();
        for &x in xs {
            if seen.iter().any(|s| (s - x).abs() < 1e-9) {
                continue;
            }
            seen.push(x);
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#333"/><text x="{:.1}" y="{}" text-anchor="middle">{}</text>"##,
                self.px(x),
                bottom,
                self.px(x),
                bottom + 4.0,
                self.px(x),
                bottom + 16.0,
                x
            );
        }
    }

    fn polyline(&self, out: &mut String, colour: &str, width: &str, dash: &str, pts: impl Iterator<Item = (f64, f64)>) {
        let path: Vec<String> = pts.map(|(x, y)| format!("{:.1},{:.1}", self.px(x), self.py(y))).collect();
        let dash = if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) };
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="{width}"{dash}/>"#,
            path.join(" ")
        );
    }

    /// A cross where memory does not fit; else a circle, filled where some rank spills.
    fn marker(&self, out: &mut String, colour: &str, mark: &Mark) {
        let (cx, cy) = (self.px(mark.x), self.py(mark.y));
        if !mark.fits {
            let _ = writeln!(
                out,
                r#"<path d="M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}" stroke="{colour}" stroke-width="2"/>"#,
                cx - 5.0,
                cy - 5.0,
                cx + 5.0,
                cy + 5.0,
                cx - 5.0,
                cy + 5.0,
                cx + 5.0,
                cy - 5.0
            );
        } else {
            let fill = if mark.spills { colour } else { "white" };
            let _ = writeln!(
                out,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="4" fill="{fill}" stroke="{colour}" stroke-width="1.5"/>"#
            );
        }
    }
}

/// The legend beside the plot, one entry under the other from `y`.
struct Legend {
    x: f64,
    y: f64,
}

impl Legend {
    fn entry(&mut self, out: &mut String, colour: &str, dash: &str, name: &str) {
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{:.1}">{}</text>"#,
            self.x,
            self.y,
            self.x + 24.0,
            self.y,
            self.x + 30.0,
            self.y + 4.0,
            name
        );
        self.y += 18.0;
    }

    /// What the three markers mean.
    fn markers(&self, out: &mut String) {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{:.1}" fill="#555">● some rank spills (E_r > w_r)</text><text x="{}" y="{:.1}" fill="#555">○ every encode fits its slack</text><text x="{}" y="{:.1}" fill="#555">✕ over device memory</text>"##,
            self.x,
            self.y + 10.0,
            self.x,
            self.y + 26.0,
            self.x,
            self.y + 42.0
        );
    }
}

/// The distance between axis ticks: 1, 2, 2.5 or 5 times a power of ten, giving about five
/// ticks up to `max`.
fn tick_step(max: f64) -> f64 {
    crate::picture::tick_step(max, 5.0, &[1.0, 2.0, 2.5, 5.0])
}

/// A tick's value with as many decimals as its step needs (`2.5` steps need one more).
fn tick_label(value: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize
        + usize::from((step / 10f64.powf(step.log10().floor()) - 2.5).abs() < 1e-9);
    format!("{value:.decimals$}")
}

/// The unit of a varied key, for the x axis's title.
fn unit_of(key: &str) -> Option<&'static str> {
    Some(match key.rsplit('.').next()? {
        "image_tokens" | "seq_len" => "tokens",
        "micro_batch_size" => "sequences",
        "microbatches" => "microbatches",
        "devices" | "pp" | "dp" | "tp" | "ep" => "devices",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{tick_label, tick_step};

    #[test]
    fn range_bounds_read_like_the_language_and_say_how_to_write_8k() {
        assert_eq!(super::parse_vary("batch.seq_len=4_096..8_192*2").unwrap().values, ["4096", "8192"]);
        let err = super::parse_vary("batch.seq_len=4k..8192*2").unwrap_err();
        assert_eq!(err, "`4k` in `batch.seq_len=4k..8192*2` is not a number: write it in full, `4096` or `4000`");
    }

    #[test]
    fn a_sweep_past_the_limit_is_refused_from_its_sizes() {
        let vary = |key: &str| super::parse_vary(&format!("{key}=1..4000+1")).unwrap();
        let err = super::grid(&[vary("batch.image_tokens"), vary("batch.seq_len")]).unwrap_err();
        assert!(err.starts_with("the sweep has 16000000 points (4000 × 4000), more than 4096"), "{err}");
        assert_eq!(super::grid(&[vary("batch.seq_len")]).unwrap().len(), 4000);
    }

    #[test]
    fn ticks_fall_on_round_numbers() {
        // The paper's sweep peaks near 6.5 s: ticks 0, 2, 4, 6, 8, never 5.67 or 11.35.
        assert_eq!(tick_step(6.65), 2.0);
        assert_eq!(tick_step(28.4), 10.0);
        assert_eq!(tick_step(0.012), 0.0025);
        assert_eq!(tick_label(6.0, 2.0), "6");
        assert_eq!(tick_label(0.0075, 0.0025), "0.0075");
        assert_eq!(tick_label(1.5, 0.5), "1.5");
    }
}
