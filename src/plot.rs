//! The one way the compiler draws a chart as SVG: a frame with round-number ticks, lines, bars
//! and markers. `sweep.svg` (step time against a swept value) and the histogram of
//! `mpipec data stats` (microbatches against image tokens) are both drawn in it.

use std::fmt::Write;

/// Line colours, in the order lines are drawn.
pub const COLOURS: [&str; 6] = ["#1f78b4", "#e31a1c", "#33a02c", "#6a3d9a", "#ff7f00", "#b15928"];

/// The plot area and how values map into it. The x axis is logarithmic when the values grow
/// by one constant factor (a `*` range), so its points are evenly spaced.
pub struct Frame {
    pub left: f64,
    pub top: f64,
    pub w: f64,
    pub h: f64,
    /// Whether the x axis is logarithmic (its title should say so).
    pub geometric: bool,
    x0: f64,
    x1: f64,
    step: f64,
    ticks: usize,
    ymax: f64,
}

impl Frame {
    pub fn new(xs: &[f64], highest: f64) -> Frame {
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

    pub fn px(&self, x: f64) -> f64 {
        let fx = if self.geometric { x.ln() } else { x };
        self.left + if self.x1 > self.x0 { self.w * (fx - self.x0) / (self.x1 - self.x0) } else { self.w / 2.0 }
    }

    pub fn py(&self, y: f64) -> f64 {
        self.top + self.h - if self.ymax > 0.0 { self.h * y / self.ymax } else { 0.0 }
    }

    /// The document's head, the title, both axes with their ticks and their titles; a tick on
    /// the x axis at each of `xs`.
    pub fn axes(&self, out: &mut String, title: &str, xs: &[f64], x_title: &str, y_title: &str) {
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
            r#"<text x="{}" y="{}" text-anchor="middle">{x_title}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{y_title}</text>"#,
            left + w / 2.0,
            top + h + 36.0,
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

    pub fn polyline(
        &self,
        out: &mut String,
        colour: &str,
        width: &str,
        dash: &str,
        pts: impl Iterator<Item = (f64, f64)>,
    ) {
        let path: Vec<String> = pts.map(|(x, y)| format!("{:.1},{:.1}", self.px(x), self.py(y))).collect();
        let dash = if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) };
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="{width}"{dash}/>"#,
            path.join(" ")
        );
    }

    /// A bar from the x axis up to `y`, centred on `x` and `width` pixels wide.
    pub fn bar(&self, out: &mut String, colour: &str, x: f64, y: f64, width: f64) {
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="{width:.1}" height="{:.1}" fill="{colour}"/>"#,
            self.px(x) - width / 2.0,
            self.py(y),
            self.top + self.h - self.py(y)
        );
    }
}

/// The distance between axis ticks: 1, 2, 2.5 or 5 times a power of ten, giving about five
/// ticks up to `max`, so the labels are round numbers.
pub fn tick_step(max: f64) -> f64 {
    crate::picture::tick_step(max, 5.0, &[1.0, 2.0, 2.5, 5.0])
}

/// A tick's value with as many decimals as its step needs (`2.5` steps need one more).
pub fn tick_label(value: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize
        + usize::from((step / 10f64.powf(step.log10().floor()) - 2.5).abs() < 1e-9);
    format!("{value:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::{tick_label, tick_step};

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
