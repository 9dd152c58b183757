//! What the SVG pictures share (the timeline, the sweep chart): text made safe for SVG, and
//! axis ticks on round numbers.

/// `text` as it can stand inside an SVG element or a quoted attribute.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The distance between axis ticks for about `count` of them over `span`: the smallest of
/// `factors` times a power of ten that is at least `span / count` (ten times it when none is),
/// so the labels are round numbers.
pub fn tick_step(span: f64, count: f64, factors: &[f64]) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / count;
    let magnitude = 10f64.powf(raw.log10().floor());
    factors.iter().map(|f| f * magnitude).find(|t| *t >= raw).unwrap_or(10.0 * magnitude)
}

#[cfg(test)]
mod tests {
    use super::{escape, tick_step};

    #[test]
    fn ticks_fall_on_round_numbers() {
        // The paper's sweep peaks near 6.5 s: ticks 0, 2, 4, 6, 8, never 5.67 or 11.35.
        let sweep = [1.0, 2.0, 2.5, 5.0];
        assert_eq!(tick_step(6.65, 5.0, &sweep), 2.0);
        assert_eq!(tick_step(28.4, 5.0, &sweep), 10.0);
        assert_eq!(tick_step(0.012, 5.0, &sweep), 0.0025);
        assert_eq!(tick_step(9.0, 8.0, &[1.0, 2.0, 5.0]), 2.0);
        assert_eq!(tick_step(f64::NAN, 5.0, &sweep), 1.0);
    }

    #[test]
    fn escapes_what_svg_reads_as_markup() {
        assert_eq!(escape(r#"a<b> & "c""#), "a&lt;b&gt; &amp; &quot;c&quot;");
    }
}
