//! Published training runs, predicted: every plan under examples/published/ is a run whose
//! throughput a paper or a project's documentation reports. Its header names the run, the
//! source and the published figure:
//!
//! ```text
//! // run: GPT 1.7B, 32 × A100 80GB
//! // source: Narayanan et al., SC'21, Table 1 (https://arxiv.org/abs/2104.04473)
//! // published: 137 TFLOP/s per GPU, megatron-eq3
//! ```
//!
//! The last word of `published:` says what the figure measures, so that ours is computed the
//! same way from the simulated step (see `Metric`). The table of docs/costs.md between
//! `<!-- published: … -->` and `<!-- end published -->` is what this test computes; any
//! difference fails and prints the new table, and `MPIPEC_BLESS=1 cargo test --test published`
//! writes it into the document.

mod common;

use std::path::Path;

const BLESS: &str = "MPIPEC_BLESS";
const BEGIN: &str = "<!-- published: MPIPEC_BLESS=1 cargo test --test published -->";
const END: &str = "<!-- end published -->";

/// What a published figure measures.
#[derive(Clone, Copy)]
enum Metric {
    /// TFLOP/s per GPU with the FLOPs of Narayanan et al. (SC'21), Eq. 3:
    /// F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per step, which counts the forward that full
    /// recompute repeats (hardware FLOPs), only the matrix products, and the whole s×s score
    /// matrix.
    MegatronEq3,
    /// Tokens per second per device: the step's tokens over step time and devices.
    Tokens,
}

impl Metric {
    fn parse(word: &str) -> Option<Metric> {
        match word {
            "megatron-eq3" => Some(Metric::MegatronEq3),
            "tokens" => Some(Metric::Tokens),
            _ => None,
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Metric::MegatronEq3 => "TFLOP/s per GPU (Eq. 3, recompute counted)",
            Metric::Tokens => "tokens/s per GPU",
        }
    }

    /// The figure for `plan` trained at `step` seconds per step.
    fn of(self, plan: &mpipe::plan::Plan, step: f64) -> f64 {
        let c = &plan.cluster;
        let b = &plan.batch;
        let sequences = (b.microbatches * b.micro_batch_size * c.dp) as f64;
        let s = b.seq_len as f64;
        match self {
            Metric::Tokens => sequences * s / step / c.devices as f64,
            Metric::MegatronEq3 => {
                let mpipe::plan::ArchKind::Decoder(d) = &plan.model.parts[0].arch.kind else {
                    panic!("megatron-eq3 counts a decoder's FLOPs")
                };
                let (l, h, v) = (d.layers as f64, d.hidden as f64, d.vocab as f64);
                let flops = 96.0 * sequences * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
                flops / step / c.devices as f64 / 1e12
            }
        }
    }
}

/// One plan's header and what the simulator makes of it.
struct Row {
    file: String,
    run: String,
    source: String,
    metric: Metric,
    published: f64,
    predicted: f64,
    step: f64,
    devices: u64,
}

fn header<'a>(text: &'a str, key: &str, file: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix("// ").and_then(|l| l.strip_prefix(key)).and_then(|l| l.strip_prefix(": ")))
        .unwrap_or_else(|| panic!("{file} has no `// {key}:` line"))
        .trim()
}

fn row(path: &Path) -> Row {
    let key = path.strip_prefix(common::root()).unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let published = header(&text, "published", &key);
    let number = published.split_whitespace().next().unwrap().replace(',', "");
    let metric = published.rsplit([' ', ',']).next().and_then(Metric::parse);
    let metric = metric.unwrap_or_else(|| panic!("{key}: `published:` ends in megatron-eq3 or tokens"));
    let loader = common::repo_loader(&["examples/published"]);
    let checked = mpipe::driver::compile(&key, &key, text.as_bytes().to_vec(), &loader);
    let plan = checked.plan.unwrap_or_else(|| panic!("{key} does not check: {:?}", checked.diagnostics));
    let (_, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
    let step = sim.report.step_time_s;
    Row {
        file: path.file_name().unwrap().to_string_lossy().into_owned(),
        run: header(&text, "run", &key).to_string(),
        source: header(&text, "source", &key).to_string(),
        metric,
        published: number.parse().unwrap_or_else(|_| panic!("{key}: `published:` starts with a number")),
        predicted: metric.of(&plan, step),
        step,
        devices: plan.cluster.devices,
    }
}

/// Whole units from a thousand up (tokens per second), tenths below (TFLOP/s).
fn figure(x: f64) -> String {
    if x >= 1000.0 { format!("{x:.0}") } else { format!("{x:.1}") }
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| run | source | unit | published | predicted | difference | simulated step |\n|---|---|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let diff = 100.0 * (r.predicted - r.published) / r.published;
        t.push_str(&format!(
            "| [{}](../examples/published/{}) | {} | {} | {} | {} | {:+.1}% | {:.3} s |\n",
            r.run,
            r.file,
            r.source,
            r.metric.unit(),
            figure(r.published),
            figure(r.predicted),
            diff,
            r.step
        ));
    }
    let within = rows.iter().filter(|r| ((r.predicted - r.published) / r.published).abs() <= 0.15).count();
    t.push_str(&format!("\n{within} of {} runs within ±15%.\n", rows.len()));
    t
}

#[test]
fn the_published_runs_table_is_what_the_cost_model_predicts() {
    let dir = common::root().join("examples/published");
    let mut rows: Vec<Row> = common::files_under(&dir, "mpipe")
        .iter()
        .filter(|p| !p.to_string_lossy().contains("/lib/"))
        .map(|p| row(p))
        .collect();
    // By source, then by size of the run, as the sources' own tables go.
    rows.sort_by(|a, b| (&a.source, a.devices).cmp(&(&b.source, b.devices)));
    assert!(rows.len() >= 6, "fewer published runs than the table promises ({})", rows.len());
    let fresh = table(&rows);
    let doc_path = common::root().join("docs/costs.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let (before, rest) = doc.split_once(BEGIN).unwrap_or_else(|| panic!("docs/costs.md has no `{BEGIN}`"));
    let (quoted, after) = rest.split_once(END).unwrap_or_else(|| panic!("docs/costs.md has no `{END}`"));
    if quoted.trim() == fresh.trim() {
        return;
    }
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&doc_path, format!("{before}{BEGIN}\n{fresh}{END}{after}")).unwrap();
        return;
    }
    panic!(
        "docs/costs.md's published-runs table is stale; the cost model gives:\n\n{fresh}\nwrite it with `{BLESS}=1 cargo test --test published`"
    );
}
