//! The pictures are pictures: `timeline.svg` from a build and `sweep.svg` from a sweep,
//! rendered by a real browser (headless Chromium, from `scripts/chromium`), are not blank and
//! show their legend. An SVG that parses as XML can still draw nothing (a wrong viewBox,
//! everything white or outside the canvas); only rendering it tells.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the page below measured of one rendered SVG.
#[derive(Debug, serde::Deserialize)]
struct Rendered {
    width: f64,
    height: f64,
    /// Share of pixels that are not the white background.
    ink: f64,
    /// Distinct colours drawn (to 4 bits per channel).
    colours: usize,
    /// The element with id or class `legend` has a visible size and some text.
    legend: bool,
}

fn chromium() -> PathBuf {
    PathBuf::from(common::setup("chromium"))
}

/// The page: the SVG inline (so its elements can be measured), drawn again into a canvas
/// from its own markup (so its pixels can be counted); the verdict goes into an attribute
/// that `--dump-dom` prints.
const PAGE: &str = r#"<!doctype html><html><body>SVG<script>
const svg = document.querySelector('svg');
const legend = svg.querySelector('#legend, .legend');
const box = legend ? legend.getBBox() : null;
const markup = new XMLSerializer().serializeToString(svg);
const img = new Image();
img.onload = () => {
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const ctx = c.getContext('2d');
  ctx.fillStyle = 'white'; ctx.fillRect(0, 0, c.width, c.height);
  ctx.drawImage(img, 0, 0);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  let ink = 0; const colours = new Set();
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) ink++;
    colours.add((d[i] >> 4) * 256 + (d[i + 1] >> 4) * 16 + (d[i + 2] >> 4));
  }
  document.body.setAttribute('data-rendered', JSON.stringify({
    width: c.width, height: c.height, ink: ink / (c.width * c.height), colours: colours.size,
    legend: !!box && box.width > 0 && box.height > 0 && legend.textContent.trim().length > 0,
  }));
};
img.src = 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(markup)));
</script></body></html>"#;

fn render(browser: &Path, svg: &str, scratch: &Path) -> Rendered {
    let page = scratch.join("page.html");
    std::fs::write(&page, PAGE.replace("SVG", svg)).unwrap();
    let o = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", scratch.join("profile").display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&o.stdout);
    let attribute = dom
        .split("data-rendered=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("the page reported nothing:\n{dom}\n{}", String::from_utf8_lossy(&o.stderr)));
    serde_json::from_str(&attribute.replace("&quot;", "\"").replace("&amp;", "&")).unwrap()
}

fn mpipec(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_mpipec")).args(args).current_dir(common::root()).output().unwrap();
    assert!(o.status.success(), "mpipec {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn assert_a_picture(name: &str, r: &Rendered) {
    assert!(r.width >= 300.0 && r.height >= 150.0, "{name} renders {} x {} pixels", r.width, r.height);
    assert!(r.ink > 0.005 && r.colours >= 4, "{name} renders (nearly) blank: {r:?}");
}

#[test]
fn the_timeline_and_the_sweep_plot_render_with_their_legends() {
    let browser = chromium();
    let scratch = std::env::temp_dir().join(format!("mpipec-pictures-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let out = scratch.join("out");
    let out_arg = out.to_str().unwrap();

    mpipec(&["build", "examples/paper_small.mpipe", "-o", out_arg]);
    let timeline = render(&browser, &std::fs::read_to_string(out.join("timeline.svg")).unwrap(), &scratch);
    assert_a_picture("timeline.svg", &timeline);
    assert!(timeline.legend, "timeline.svg shows no legend: {timeline:?}");

    mpipec(&["sweep", "examples/paper_small.mpipe", "--vary", "batch.image_tokens=1024..16384*4", "-o", out_arg]);
    let sweep = render(&browser, &std::fs::read_to_string(out.join("sweep.svg")).unwrap(), &scratch);
    assert_a_picture("sweep.svg", &sweep);
    assert!(sweep.legend, "sweep.svg shows no legend: {sweep:?}");

    let _ = std::fs::remove_dir_all(&scratch);
}
