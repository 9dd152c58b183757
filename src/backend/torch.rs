//! The `torch` target: `OUT/torch/launch.sh` (torchrun, single node by default, multi-node from
//! NNODES / NODE_RANK / MASTER_ADDR / MASTER_PORT) and the runtime that executes `OUT/plan.json` (or `OUT/plan.compact.json`)
//! rank by rank (the Python package `mpipec.torch`, shipped inside the binary and written beside the
//! script as `torch/python/mpipec/`; it needs only torch). Also the
//! miniature `mpipec verify` runs: the plan's model with the same parts, layer counts and
//! trainability, tiny and in fp32.

use crate::algebra::OwnerSpec;
use crate::ir::PlanIr;
use crate::outputs::Artifact;
use crate::plan::Plan;

// PACKAGE and PACKAGE_DIGEST: python/mpipec/**.py, embedded by build.rs.
include!(concat!(env!("OUT_DIR"), "/python_package.rs"));

/// Where a build writes the package, under its output directory.
const PACKAGE_DIR: &str = "torch/python";

pub fn artifacts(plan: &Plan, ir: &PlanIr) -> Vec<Artifact> {
    let world = ir.rank_map.len();
    let comment = [
        format!(
            "Launches {} with the mpipe torch runtime: {world} processes ({} pipeline ranks x {} data-parallel",
            ir.source, ir.pipeline.ranks, ir.pipeline.dp
        ),
        "replicas). The model comes from the adapter that MPIPE_CONFIG (a JSON file, default".into(),
        "config.json here: the built-in miniature of the plan's model) names under \"adapter\"; see".into(),
        "python/mpipec/torch/adapter.py for the adapter interface. The runtime is the package in".into(),
        "python/ (mpipec.torch), the one `pip install mpipec` installs.".into(),
    ];
    let mut launch = super::shell::prologue(&comment, world as u64, 29500);
    // The build writes one of the two encodings of the plan (`--plan-format`); the runtime reads both.
    launch.push_str(&format!(
        "plan=\"$here/../{}\"\n[ -f \"$plan\" ] || plan=\"$here/../{}\"\n",
        crate::outputs::READABLE_PLAN,
        crate::outputs::COMPACT_PLAN
    ));
    launch.push_str("export PYTHONPATH=\"$here/python${PYTHONPATH:+:$PYTHONPATH}\"\n");
    let mut args =
        r#"--plan "$plan" --config "${MPIPE_CONFIG:-$here/config.json}" --steps "${MPIPE_STEPS:-1}""#.to_string();
    if plan.owner == Some(OwnerSpec::Adaptive) {
        // Each step runs its batch's own plan, from the `mpipec adapt` command `mpipec build`
        // writes beside this script (the library knows no paths to write it).
        launch.push_str(concat!(
            "# Each step runs the plan its batch calls for: adaptive.json names the `mpipec adapt` command.\n",
            "[ -f \"$here/adaptive.json\" ] || { echo \"$0: $here/adaptive.json is missing (mpipec build writes it)\" >&2; exit 2; }\n",
        ));
        args.push_str(r#" --adaptive "$here/adaptive.json""#);
    }
    launch.push_str(&super::shell::torchrun(
        r#""${PYTHON:-python3}" -m torch.distributed.run"#,
        "-m mpipec.torch.launch",
        &args,
    ));
    let config = serde_json::to_string_pretty(&miniature_config(plan)).expect("json values serialise") + "\n";
    let mut out = vec![
        Artifact { path: "torch/launch.sh".into(), contents: launch },
        Artifact { path: "torch/config.json".into(), contents: config },
    ];
    out.extend(
        PACKAGE
            .iter()
            .map(|(path, text)| Artifact { path: format!("{PACKAGE_DIR}/{path}"), contents: text.to_string() }),
    );
    out
}

/// The adapter configuration of the miniature: tiny widths, and what each global layer is.
pub fn miniature_config(plan: &Plan) -> serde_json::Value {
    let images = plan.batch.images;
    serde_json::json!({
        "adapter": "miniature",
        "seed": 1,
        "width": 16,
        "enc_width": 12,
        "patch_dim": 10,
        "vocab": 32,
        // At least one token an image: the plan's images split the same way here.
        "image_tokens": images * (4 / images).max(1),
        "images": images,
        "text_tokens": 6,
        "micro_batch_size": 1,
        "lr": 0.05,
        "kinds": kinds(plan),
    })
}

/// What each global layer of the plan's model is, in the plan's order of parts.
pub fn kinds(plan: &Plan) -> Vec<serde_json::Value> {
    let mut kinds = Vec::new();
    for part in &plan.model.parts {
        let n = part.arch.layers();
        for i in 0..n {
            kinds.push(serde_json::json!({
                "encoder": part.arch.is_encoder(),
                "trainable": !part.frozen,
                "part_first": i == 0,
                "part_last": i + 1 == n,
            }));
        }
    }
    kinds
}

/// The families the adapter `mpipec.torch.hf` builds, each a vision tower (with its merger or projector) feeding a decoder.
pub const HF_FAMILIES: &[&str] = &["qwen2_5_vl", "llava"];

/// The configuration of `family`'s tiny random model, its vision depth and decoder layer count
/// the plan's encoder and LLM layer counts, so that the plan's cut falls between its blocks;
/// an error naming the mismatch when the family is unknown or the plan's model is not one
/// encoder followed by one decoder.
pub fn hf_config(plan: &Plan, family: &str) -> Result<serde_json::Value, String> {
    if !HF_FAMILIES.contains(&family) {
        let known: Vec<String> = HF_FAMILIES.iter().map(|f| format!("`hf:{f}`")).collect();
        return Err(format!("the model `hf:{family}` is not one the adapter knows; it builds {}", known.join(", ")));
    }
    let parts = &plan.model.parts;
    let [vision, text] = parts.as_slice() else {
        let count = if parts.len() == 1 { "one part".to_string() } else { format!("{} parts", parts.len()) };
        return Err(hf_mismatch(plan, family, &format!("has {count}")));
    };
    if !vision.arch.is_encoder() || text.arch.is_encoder() {
        return Err(hf_mismatch(plan, family, &format!("has `{}` then `{}`", vision.name, text.name)));
    }
    if plan.batch.images > 1 {
        return Err(format!(
            "`hf:{family}` makes its own images, of several sizes, and cannot split them as the plan's `batch.images = {}` says; verify this plan with `batch.images = 1` or on the miniature (without `--model`)",
            plan.batch.images
        ));
    }
    Ok(serde_json::json!({
        "adapter": "hf",
        "family": family,
        "seed": 1,
        "vision_layers": vision.arch.layers(),
        "text_layers": text.arch.layers(),
        "micro_batch_size": 1,
        "lr": 0.05,
        "kinds": kinds(plan),
    }))
}

fn hf_mismatch(plan: &Plan, family: &str, found: &str) -> String {
    let parts: Vec<String> = plan
        .model
        .parts
        .iter()
        .map(|p| format!("{} ({})", p.name, if p.arch.is_encoder() { "encoder" } else { "decoder" }))
        .collect();
    format!(
        "`hf:{family}` is a vision encoder followed by a decoder, but the plan's model {found}: {}",
        parts.join(", ")
    )
}
