//! `mpipec profile PLAN [-o FILE] [--model M] [--procs N] [--dp D] [--steps K] [--python PATH]`:
//! the plan's layers and runtime measured on this machine's devices by `python -m
//! mpipec.torch.profile`, written as a profile the cost model reads (docs/costs.md).

use std::path::{Path, PathBuf};

use mpipe::plan::Plan;
use mpipe::profile::{self, Calls, Profile};

use super::verify::{self, usage_error};
use super::{EXIT_INPUT, EXIT_USAGE, Global};

pub struct Options {
    pub out: PathBuf,
    pub model: String,
    pub procs: Option<u64>,
    pub dp: u64,
    pub steps: usize,
    pub python: Option<PathBuf>,
    pub backend: Option<String>,
}

/// What the measurement is of: each layer kind with a layer of that kind, the kind of every
/// layer, and what the profile says of the model and its shapes.
fn request(plan_path: &Path, mini: &Plan, config: &serde_json::Value, options: &Options) -> serde_json::Value {
    let miniature = options.model == "miniature";
    let kinds = mini.model.layer_kinds(miniature);
    let mut first = serde_json::Map::new();
    for (layer, kind) in kinds.iter().enumerate() {
        first.entry(kind.clone()).or_insert(layer.into());
    }
    let parts: Vec<serde_json::Value> = mini
        .model
        .parts
        .iter()
        .map(|p| serde_json::json!({ "name": p.name, "arch": p.arch.name, "layers": p.arch.layers() }))
        .collect();
    let seq_len = match (config["text_tokens"].as_u64(), config["image_tokens"].as_u64()) {
        (Some(text), Some(image)) if miniature => text + image,
        _ => mini.batch.seq_len,
    };
    serde_json::json!({
        "kinds": first,
        "kind_of_layer": kinds,
        "steps": options.steps,
        "meta": {
            "plan": plan_path.display().to_string(),
            "versions": { "mpipec": env!("CARGO_PKG_VERSION") },
            "model": { "source": options.model, "parts": parts },
            "shapes": { "micro_batch_size": mini.batch.micro_batch_size, "seq_len": seq_len },
        },
    })
}

fn write_run(dir: &Path, mini: &Plan, config: &serde_json::Value, request: &serde_json::Value) -> std::io::Result<()> {
    let built = mpipe::driver::build(mini).map_err(|e| std::io::Error::other(e.problems.join("; ")))?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("plan.json"), built.derived.ir.to_json())?;
    std::fs::write(dir.join("config.json"), config.to_string())?;
    std::fs::write(dir.join("request.json"), request.to_string())
}

/// The profile written whole or not at all: into a file beside `out`, then renamed over it.
fn write_profile(out: &Path, text: &str) -> std::io::Result<()> {
    let staging = out.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&staging, text).and_then(|()| std::fs::rename(&staging, out)).inspect_err(|_| {
        let _ = std::fs::remove_file(&staging);
    })
}

fn summary(p: &Profile) -> String {
    let mut lines =
        vec![format!("{} layer kinds: {}", p.layers.len(), p.layers.keys().cloned().collect::<Vec<_>>().join(", "))];
    if let Some(h) = p.host.filter(|_| p.device_type == "cpu") {
        let how = h.scheduling().map_or(String::new(), |how| format!(", {how}"));
        lines.push(format!(
            "host: {} cores, {} thread(s) a process{how}; a plan's ranks share them in `sim`",
            h.cores, h.threads
        ));
    }
    if let Some(l) = &p.p2p {
        lines.push(format!(
            "point-to-point: a message delivered to a waiting rank in {} + n / {:.2} GB/s",
            us(l.alpha_s),
            l.beta_bytes_per_s / 1e9
        ));
    }
    for (group, l) in &p.all_reduce {
        lines.push(format!(
            "all-reduce over {group}: alpha {} per ring step, {:.2} GB/s",
            us(l.alpha_s),
            l.beta_bytes_per_s / 1e9
        ));
    }
    if let Some(r) = &p.runtime {
        lines.push(format!(
            "runtime: {} an instruction, {} more a compute, {} a send, {} a receive already there, {} of other threads' CPU a message received",
            us(r.instruction_s),
            us(r.compute_s),
            us(r.send_s),
            us(r.recv_s),
            us(r.message_cpu_s)
        ));
        if r.send_wait_s > 0.0 {
            lines.push(format!(
                "a message waits up to {} for its sending thread while the sender goes on computing",
                us(r.send_wait_s)
            ));
        }
    }
    if let Some(line) = calls_summary(p.runtime.map(|r| r.call)) {
        lines.push(line);
    }
    if let Some(line) = speed_summary(&p.speed_trace) {
        lines.push(line);
    }
    if let Some(k) = &p.host_speed {
        lines.push(format!(
            "host's speed kernel: {} a pass; `verify --profile` sets its prediction beside a run at the host's speed then",
            us(k.seconds)
        ));
    }
    lines.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

fn us(s: f64) -> String {
    format!("{:.1} us", s * 1e6)
}

/// What each compute op costs once an instruction; nothing for an older profile, whose layers'
/// times hold it.
fn calls_summary(calls: Option<Calls>) -> Option<String> {
    let c = calls.filter(|c| *c != Calls::default())?;
    Some(format!(
        "a compute instruction's call, once however many layers it runs: {} a forward, {} a backward, {} an input half, {} a weight half",
        us(c.forward_s),
        us(c.backward_s),
        us(c.backward_input_s),
        us(c.backward_weight_s)
    ))
}

/// How far the host's speed moved over the profile's run: the instructions' time against their
/// medians', and the ratio a tenth of them ran over.
fn speed_summary(trace: &[Vec<(f64, f64)>]) -> Option<String> {
    let pieces: Vec<(f64, f64)> = trace.iter().flatten().copied().collect();
    let typical: f64 = pieces.iter().map(|(s, _)| s).sum();
    let took: f64 = pieces.iter().map(|(s, x)| s * x).sum();
    let mut ratios: Vec<f64> = pieces.iter().map(|(_, x)| *x).collect();
    ratios.sort_by(f64::total_cmp);
    let tenth = *ratios.get(ratios.len() * 9 / 10)?;
    Some(format!(
        "host's speed: {} compute instructions took {:.2} times their medians in all, a tenth of them over {tenth:.2} times; `sim` runs the step through it",
        pieces.len(),
        took / typical.max(f64::MIN_POSITIVE)
    ))
}

pub fn run(global: &Global, plan: &Path, options: &Options) -> u8 {
    // Said before the minutes of measuring, not after.
    let folder = options.out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !folder.is_dir() {
        let message = format!("cannot write `{}`: no folder `{}`", options.out.display(), folder.display());
        return usage_error(global, &message, EXIT_USAGE);
    }
    let verify_options = verify::Options {
        procs: options.procs,
        dp: options.dp,
        steps: options.steps,
        model: options.model.clone(),
        python: options.python.clone(),
        profile: None,
        prepare: None,
    };
    let mini = match verify::miniature_plan(global, plan, &verify_options) {
        Ok(mini) => mini,
        Err(status) => return status,
    };
    let config = match verify::model_config(&options.model, &mini) {
        Ok(c) => c,
        Err((message, status)) => return usage_error(global, &message, status),
    };
    let dir = std::env::temp_dir().join(format!("mpipec-profile-{}", std::process::id()));
    if let Err(e) = write_run(&dir, &mini, &config, &request(plan, &mini, &config, options)) {
        return usage_error(global, &format!("cannot write the run to `{}`: {e}", dir.display()), EXIT_USAGE);
    }
    let package = match super::python::package_root() {
        Ok(p) => p,
        Err(message) => return usage_error(global, &message, EXIT_USAGE),
    };
    let py = super::python::interpreter(options.python.as_deref());
    println!(
        "profiling {} ({}) on {} processes (pp {} x dp {}), {} steps of the runtime",
        plan.display(),
        options.model,
        mini.cluster.pp * mini.cluster.dp,
        mini.cluster.pp,
        mini.cluster.dp,
        options.steps
    );
    let mut cmd = super::python::module(&py, &package, "mpipec.torch.profile");
    cmd.arg("--run").arg(&dir);
    if let Some(b) = &options.backend {
        cmd.args(["--backend", b]);
    }
    let status = match cmd.status() {
        Ok(s) if s.success() => None,
        Ok(s) if s.code() == Some(2) => Some(EXIT_USAGE),
        Ok(_) => Some(EXIT_INPUT),
        Err(e) => Some(usage_error(global, &format!("cannot run `{}`: {e}", py.display()), EXIT_USAGE)),
    };
    let text = std::fs::read_to_string(dir.join("profile.json"));
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(status) = status {
        return status;
    }
    let checked = text.map_err(|e| format!("cannot read the runtime's profile: {e}")).and_then(|t| {
        profile::parse(&t)
            .map(|p| (p, t))
            .map_err(|m| format!("the runtime's profile is malformed: field `{}` {}", m.field, m.problem))
    });
    match checked {
        Ok((p, text)) => match write_profile(&options.out, &text) {
            Ok(()) => {
                println!(
                    "wrote {} ({} `{}`, {})\n{}",
                    options.out.display(),
                    p.device_type,
                    p.device_name,
                    p.date,
                    summary(&p)
                );
                0
            }
            Err(e) => usage_error(global, &format!("cannot write `{}`: {e}", options.out.display()), EXIT_USAGE),
        },
        Err(message) => usage_error(global, &message, EXIT_INPUT),
    }
}

#[cfg(test)]
mod tests {
    use super::{Calls, calls_summary, speed_summary};

    /// Four typical seconds that took six (1 + 3 + 2), the tenth slowest at 3 times; no trace,
    /// no line.
    #[test]
    fn the_summary_says_how_far_the_hosts_speed_moved() {
        let line = speed_summary(&[vec![(1.0, 1.0), (1.0, 3.0)], vec![(2.0, 1.0)]]).unwrap();
        assert!(
            line.contains(
                "3 compute instructions took 1.50 times their medians in all, a tenth of them over 3.00 times"
            ),
            "{line}"
        );
        assert_eq!(speed_summary(&[]), None);
        assert_eq!(speed_summary(&[vec![]]), None);
    }

    /// A profile's calls, each op's; none from an older profile (all 0) or one without a runtime.
    #[test]
    fn the_summary_gives_each_ops_call_where_measured() {
        let calls = Calls { forward_s: 1e-5, backward_s: 8e-5, backward_input_s: 9e-5, backward_weight_s: 7e-5 };
        let line = calls_summary(Some(calls)).unwrap();
        assert!(
            line.contains("10.0 us a forward, 80.0 us a backward, 90.0 us an input half, 70.0 us a weight half"),
            "{line}"
        );
        assert_eq!(calls_summary(Some(Calls::default())), None);
        assert_eq!(calls_summary(None), None);
    }
}
