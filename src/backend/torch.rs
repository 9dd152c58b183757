//! The `torch` target: `OUT/torch/launch.sh` (torchrun, single node by default, multi-node from
//! NNODES / NODE_RANK / MASTER_ADDR / MASTER_PORT) and the runtime that executes `OUT/plan.json`
//! rank by rank (`mpipe_runtime.py`, shipped inside the binary; it needs only torch). Also the
//! miniature `mpipec verify` runs: the plan's model with the same parts, layer counts and
//! trainability, tiny and in fp32.

use crate::build::Artifact;
use crate::check::spec::Plan;
use crate::ir::PlanIr;

pub const RUNTIME: &str = include_str!("torch/mpipe_runtime.py");

pub fn artifacts(plan: &Plan, ir: &PlanIr) -> Vec<Artifact> {
    let world = ir.rank_map.len();
    let launch = format!(
        r#"#!/usr/bin/env bash
# Launches {source} with the mpipe torch runtime: {world} processes ({pp} pipeline ranks x {dp}
# data-parallel replicas). Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT and
# NPROC_PER_NODE on every node. The model comes from the adapter that MPIPE_CONFIG (a JSON
# file, default config.json here: the built-in miniature of the plan's model) names under
# "adapter"; see mpipe_runtime.py for the adapter interface.
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
nnodes="${{NNODES:-1}}"
nproc="${{NPROC_PER_NODE:-$(( {world} / nnodes ))}}"
exec "${{PYTHON:-python3}}" -m torch.distributed.run \
    --nnodes "$nnodes" --node-rank "${{NODE_RANK:-0}}" \
    --master-addr "${{MASTER_ADDR:-127.0.0.1}}" --master-port "${{MASTER_PORT:-29500}}" \
    --nproc-per-node "$nproc" \
    "$here/mpipe_runtime.py" --plan "$here/../plan.json" --config "${{MPIPE_CONFIG:-$here/config.json}}" --steps "${{MPIPE_STEPS:-1}}"
"#,
        source = ir.source,
        pp = ir.pipeline.ranks,
        dp = ir.pipeline.dp,
    );
    let config = serde_json::to_string_pretty(&miniature_config(plan)).expect("json values serialise") + "\n";
    vec![
        Artifact { path: "torch/launch.sh".into(), contents: launch },
        Artifact { path: "torch/mpipe_runtime.py".into(), contents: RUNTIME.into() },
        Artifact { path: "torch/config.json".into(), contents: config },
    ]
}

/// The adapter configuration of the miniature: tiny widths, and what each global layer is.
pub fn miniature_config(plan: &Plan) -> serde_json::Value {
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
    serde_json::json!({
        "adapter": "miniature",
        "seed": 1,
        "width": 16,
        "enc_width": 12,
        "patch_dim": 10,
        "vocab": 32,
        "image_tokens": 4,
        "text_tokens": 6,
        "micro_batch_size": 1,
        "lr": 0.05,
        "kinds": kinds,
    })
}
