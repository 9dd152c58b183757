//! `mpipec sweep`: one plan under a range of values of one or more keys (as in `--set`),
//! each point checked, derived and simulated — the paper's own falsifier: raise the image
//! tokens until encoder work exceeds the warmup slack and see where transpose stops paying.

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

/// Every combination of the varied values, first key slowest.
pub fn grid(varies: &[Vary]) -> Result<Vec<Vec<(String, String)>>, String> {
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for v in varies {
        points = points
            .into_iter()
            .flat_map(|p| v.values.iter().map(move |x| [p.clone(), vec![(v.key.clone(), x.clone())]].concat()))
            .collect();
        if points.len() > MAX_POINTS {
            return Err(format!("the sweep has more than {MAX_POINTS} points"));
        }
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
    use std::fmt::Write;
    let (left, top, w, h) = (80.0, 50.0, 720.0, 360.0);
    let xs: Vec<f64> =
        points.iter().filter_map(|p| p.values.first().and_then(|(_, v)| v.parse::<f64>().ok())).collect();
    let geometric = xs.iter().all(|x| *x > 0.0) && xs.len() > 2 && {
        let r: Vec<f64> = xs.windows(2).filter(|w| w[0] != w[1]).map(|w| w[1] / w[0]).collect();
        !r.is_empty() && r.iter().all(|q| (q - r[0]).abs() < 1e-6 && *q > 1.0)
    };
    let fx = |x: f64| if geometric { x.ln() } else { x };
    let (x0, x1) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(fx(*x)), b.max(fx(*x))));
    // Per line: its name and its points (x, step time, spills, fits).
    type Line = (String, Vec<(f64, f64, bool, bool)>);
    let mut series: Vec<Line> = Vec::new();
    let mut baselines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for p in points {
        let Some(x) = p.values.first().and_then(|(_, v)| v.parse::<f64>().ok()) else { continue };
        let Some(r) = &p.report else { continue };
        let rest: Vec<String> = p.values.iter().skip(1).map(|(k, v)| format!("{k}={v}")).collect();
        let name = if rest.is_empty() { "this plan".to_string() } else { rest.join(", ") };
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, s)) => s.push((x, r.step_time_s, p.spills(), p.fits())),
            None => series.push((name, vec![(x, r.step_time_s, p.spills(), p.fits())])),
        }
        if p.values.len() == 1 {
            for c in &r.compare {
                match baselines.iter_mut().find(|(n, _)| *n == c.name) {
                    Some((_, s)) => s.push((x, c.step_time_s)),
                    None => baselines.push((c.name.clone(), vec![(x, c.step_time_s)])),
                }
            }
        }
    }
    let highest = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.1))
        .chain(baselines.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)))
        .fold(0.0, f64::max);
    let step = tick_step(highest * 1.02);
    let ticks = (highest * 1.02 / step).ceil().max(1.0) as usize;
    let ymax = step * ticks as f64;
    let px = |x: f64| left + if x1 > x0 { w * (fx(x) - x0) / (x1 - x0) } else { w / 2.0 };
    let py = |y: f64| top + h - if ymax > 0.0 { h * y / ymax } else { 0.0 };
    let colours = ["#1f78b4", "#e31a1c", "#33a02c", "#6a3d9a", "#ff7f00", "#b15928"];
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#,
        left + w + 230.0,
        top + h + 60.0
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{left}" y="22" font-size="14" font-weight="bold">{}</text>"#,
        title.replace('&', "&amp;").replace('<', "&lt;")
    );
    let _ = writeln!(
        out,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"/>"##,
        top + h,
        left + w,
        top + h,
        top + h
    );
    for k in 0..=ticks {
        let y = step * k as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{:.1}" x2="{left}" y2="{:.1}" stroke="#333"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left - 4.0,
            py(y),
            py(y),
            left - 8.0,
            py(y) + 4.0,
            tick_label(y, step)
        );
    }
    let mut seen: Vec<f64> = Vec::new();
    for x in &xs {
        if seen.iter().any(|s| (s - x).abs() < 1e-9) {
            continue;
        }
        seen.push(*x);
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#333"/><text x="{:.1}" y="{}" text-anchor="middle">{}</text>"##,
            px(*x),
            top + h,
            px(*x),
            top + h + 4.0,
            px(*x),
            top + h + 16.0,
            x
        );
    }
    let key = points.first().and_then(|p| p.values.first()).map(|(k, _)| k.clone()).unwrap_or_default();
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{key}{}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">step time (s)</text>"#,
        left + w / 2.0,
        top + h + 36.0,
        match (unit_of(&key), geometric) {
            (Some(unit), true) => format!(" ({unit}, log scale)"),
            (Some(unit), false) => format!(" ({unit})"),
            (None, true) => " (log scale)".to_string(),
            (None, false) => String::new(),
        },
        top + h / 2.0,
        top + h / 2.0
    );
    let mut ly = top;
    out.push_str("<g id=\"legend\" class=\"legend\">\n");
    let legend = |out: &mut String, ly: &mut f64, colour: &str, dash: &str, name: &str| {
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{:.1}">{}</text>"#,
            left + w + 20.0,
            *ly,
            left + w + 44.0,
            *ly,
            left + w + 50.0,
            *ly + 4.0,
            name
        );
        *ly += 18.0;
    };
    for (i, (name, pts)) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let path: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1))).collect();
        let _ =
            writeln!(out, r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#, path.join(" "));
        for &(x, y, spills, fits) in pts {
            if !fits {
                let (cx, cy) = (px(x), py(y));
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
                let fill = if spills { colour } else { "white" };
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{fill}" stroke="{colour}" stroke-width="1.5"/>"#,
                    px(x),
                    py(y)
                );
            }
        }
        legend(&mut out, &mut ly, colour, "", name);
    }
    for (i, (name, pts)) in baselines.iter().enumerate() {
        let colour = colours[(i + series.len()) % colours.len()];
        let path: Vec<String> = pts.iter().map(|p| format!("{:.1},{:.1}", px(p.0), py(p.1))).collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5" stroke-dasharray="5,3"/>"#,
            path.join(" ")
        );
        legend(&mut out, &mut ly, colour, "5,3", name);
    }
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{:.1}" fill="#555">● some rank spills (E_r > w_r)</text><text x="{}" y="{:.1}" fill="#555">○ every encode fits its slack</text><text x="{}" y="{:.1}" fill="#555">✕ over device memory</text>"##,
        left + w + 20.0,
        ly + 10.0,
        left + w + 20.0,
        ly + 26.0,
        left + w + 20.0,
        ly + 42.0
    );
    out.push_str("</g>\n</svg>\n");
    out
}

/// The distance between axis ticks: 1, 2, 2.5 or 5 times a power of ten, giving about five
/// ticks up to `max`, so the labels are round numbers.
fn tick_step(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let factor = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().find(|f| f * magnitude >= raw).unwrap_or(10.0);
    factor * magnitude
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
