//! `mpipec sweep`: one plan under a range of values of one or more keys (as in `--set`),
//! each point checked, derived and simulated — the paper's own falsifier: raise the image
//! tokens until encoder work exceeds the warmup slack and see where transpose stops paying.

use std::fmt::Write;

use serde::Serialize;

use crate::plot::{COLOURS, Frame};
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
    let x_title = match (unit_of(&key), frame.geometric) {
        (Some(unit), true) => format!("{key} ({unit}, log scale)"),
        (Some(unit), false) => format!("{key} ({unit})"),
        (None, true) => format!("{key} (log scale)"),
        (None, false) => key.clone(),
    };
    frame.axes(&mut out, title, &xs, &x_title, "step time (s)");
    out.push_str("<g id=\"legend\" class=\"legend\">\n");
    let mut legend = Legend { x: frame.left + frame.w + 20.0, y: frame.top };
    for (i, (name, marks)) in lines.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        frame.polyline(&mut out, colour, "2", "", marks.iter().map(|m| (m.x, m.y)));
        for mark in marks {
            marker(&frame, &mut out, colour, mark);
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

/// A cross where memory does not fit; else a circle, filled where some rank spills.
fn marker(frame: &Frame, out: &mut String, colour: &str, mark: &Mark) {
    let (cx, cy) = (frame.px(mark.x), frame.py(mark.y));
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
}
