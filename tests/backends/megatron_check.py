"""Checks mpipec's Megatron-LM launch scripts with megatron-core's own code (0.16.1, on a CPU).

Each case's launch.sh is run as written with torchrun replaced by a recording shim; the flags it
passes are then checked:
- every flag is one Megatron-LM's parser has (megatron/training/arguments.py and
  examples/multimodal/multimodal_args.py at NVIDIA/Megatron-LM d98e8a64), none a removed one;
- validate_args' rules (megatron/training/arguments.py): WORLD_SIZE divisible by tp*pp*cp, at most
  one VPP flag, the layout not with the first/last flags, max_position_embeddings at least
  seq_length and decoder_seq_length;
- the microbatch count, from megatron-core's ConstantNumMicroBatchesCalculator;
- the stage split, by megatron-core's TransformerConfig (its __post_init__ validates uneven
  first/last stages and the layout) and get_num_layers_to_build / PipelineParallelLayerLayout,
  which must give exactly the plan's layers on every (pipeline rank, virtual stage);
- where mpipec chose a layout string over the first/last flags, TransformerConfig must reject
  the first/last form of the same split (so the layout was needed), and a layout that breaks
  the two rules mpipec's writer keeps (one stage per pipeline rank and virtual stage, every
  decoder layer once) is rejected by PipelineParallelLayerLayout for exactly that reason.
Usage: python megatron_check.py cases.json
"""

import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator  # noqa: E402
from megatron.core.transformer.enums import LayerType  # noqa: E402
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

import launch  # noqa: E402

# Flags of megatron/training/arguments.py (many generated from TransformerConfig and
# TrainingConfig fields by ArgumentGroupFactory) and examples/multimodal/multimodal_args.py.
KNOWN = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--sequence-parallel", "--micro-batch-size", "--global-batch-size",
    "--bf16", "--fp16", "--use-distributed-optimizer", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--num-layers", "--hidden-size", "--ffn-hidden-size",
    "--num-attention-heads", "--kv-channels", "--group-query-attention", "--num-query-groups", "--swiglu",
    "--untie-embeddings-and-output-weights", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--multi-latent-attention", "--q-lora-rank",
    "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--seq-length",
    "--decoder-seq-length", "--max-position-embeddings",
    # examples/multimodal/multimodal_args.py
    "--language-model-type", "--tokenizer-prompt-format", "--vision-model-type", "--img-h", "--img-w",
    "--patch-dim", "--freeze-ViT", "--freeze-LM", "--recompute-vision",
}
# Removed by "Remove Encoder PP" (b600e38d7b, core_v0.14.0), or never a CLI argument.
REMOVED = {
    "--encoder-pipeline-model-parallel-size", "--encoder-tensor-model-parallel-size",
    "--pipeline-model-parallel-split-rank", "--virtual-pipeline-model-parallel-size",
}
VPP_FLAGS = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
             "--pipeline-model-parallel-layout")
ENV = {"LANGUAGE_MODEL_TYPE": "qwen2.5_7B", "TOKENIZER_PROMPT_FORMAT": "qwen2p5", "VISION_MODEL_TYPE": "clip",
       "MEGATRON_LM": "/opt/Megatron-LM"}


def config(f, **split):
    """TransformerConfig from the flags, as core_transformer_config_from_args maps them."""
    kw = dict(
        num_layers=int(f["--num-layers"]),
        hidden_size=int(f["--hidden-size"]),
        ffn_hidden_size=int(f["--ffn-hidden-size"]),
        num_attention_heads=int(f["--num-attention-heads"]),
        tensor_model_parallel_size=int(f["--tensor-model-parallel-size"]),
        pipeline_model_parallel_size=int(f["--pipeline-model-parallel-size"]),
        sequence_parallel="--sequence-parallel" in f,
        pipeline_dtype=torch.bfloat16 if "--bf16" in f else None,
        bf16="--bf16" in f,
    )
    if "--num-query-groups" in f:
        kw["num_query_groups"] = int(f["--num-query-groups"])
    if "--kv-channels" in f:
        kw["kv_channels"] = int(f["--kv-channels"])
    if "--recompute-granularity" in f:
        kw["recompute_granularity"] = f["--recompute-granularity"]
        if "--recompute-method" in f:
            kw["recompute_method"] = f["--recompute-method"]
            kw["recompute_num_layers"] = int(f["--recompute-num-layers"])
    kw.update(split)
    return TransformerConfig(**kw)


def split_of(f):
    split = {}
    if "--decoder-first-pipeline-num-layers" in f:
        split["num_layers_in_first_pipeline_stage"] = int(f["--decoder-first-pipeline-num-layers"])
    if "--decoder-last-pipeline-num-layers" in f:
        split["num_layers_in_last_pipeline_stage"] = int(f["--decoder-last-pipeline-num-layers"])
    if "--pipeline-model-parallel-layout" in f:
        split["pipeline_model_parallel_layout"] = f["--pipeline-model-parallel-layout"]
    if "--num-virtual-stages-per-pipeline-rank" in f:
        split["virtual_pipeline_model_parallel_size"] = int(f["--num-virtual-stages-per-pipeline-rank"])
    return split


def layers_by_stage(cfg, pp, vpp):
    """[vpp][pp] decoder layers as Megatron builds them."""
    if cfg.pipeline_model_parallel_layout is not None:
        layout = cfg.pipeline_model_parallel_layout.layout
        return [[layout[r][v].count(LayerType.decoder) for r in range(pp)] for v in range(vpp)]
    return [[get_num_layers_to_build(cfg, vp_stage=v if vpp > 1 else None, pp_rank=r) for r in range(pp)]
            for v in range(vpp)]


def rejected(layout, pp, num_layers, reason):
    try:
        PipelineParallelLayerLayout(layout, pp).validate_layer_layout(num_layers, 0)
    except AssertionError as e:
        assert reason in str(e), f"{layout!r} rejected for {e}, not {reason!r}"
        return
    raise AssertionError(f"Megatron accepted {layout!r}")


def check(case):
    name = case["name"]
    argv, env = launch.run(case["launch"], ENV)
    options, script, args = launch.split_torchrun(argv)
    world = case["world"]
    assert options["--nnodes"] == "1" and options["--nproc-per-node"] == str(world), (name, options)
    assert options["--node-rank"] == "0" and options["--master-addr"] == "127.0.0.1", (name, options)
    expected = "examples/multimodal/train.py" if case["vlm"] else "pretrain_gpt.py"
    assert script == f"{ENV['MEGATRON_LM']}/{expected}", (name, script)
    assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", name
    f = launch.flags(args)
    unknown = set(f) - KNOWN
    assert not unknown, f"{name}: flags Megatron-LM does not have: {sorted(unknown)}"
    assert not set(f) & REMOVED, name
    # validate_args
    tp, pp = int(f["--tensor-model-parallel-size"]), int(f["--pipeline-model-parallel-size"])
    cp = int(f.get("--context-parallel-size", 1))
    assert world % (tp * pp * cp) == 0, name
    dp = world // (tp * pp * cp)
    assert (tp, pp, dp) == (case["tp"], case["pp"], case["dp"]), name
    assert sum(v in f for v in VPP_FLAGS) <= 1, f"{name}: more than one VPP flag"
    first_last = "--decoder-first-pipeline-num-layers" in f or "--decoder-last-pipeline-num-layers" in f
    assert not (first_last and "--pipeline-model-parallel-layout" in f), name
    max_positions = int(f["--max-position-embeddings"])
    assert max_positions >= int(f["--seq-length"]), name
    assert max_positions >= int(f.get("--decoder-seq-length", 0)), name
    calc = ConstantNumMicroBatchesCalculator(int(f["--global-batch-size"]), int(f["--micro-batch-size"]), dp, False, 0)
    assert calc.get() == case["microbatches"], (name, calc.get())
    # The split, by megatron-core itself.
    cfg = config(f, **split_of(f))
    vpp = cfg.virtual_pipeline_model_parallel_size or 1
    if cfg.pipeline_model_parallel_layout is not None:
        cfg.pipeline_model_parallel_layout.validate_layer_layout(cfg.num_layers, 0)
    got = layers_by_stage(cfg, pp, vpp)
    assert got == case["decoder"], f"{name}: Megatron builds {got}, the plan has {case['decoder']}"
    if case["vlm"]:
        assert ("--freeze-ViT" in f) == case["frozen_encoder"], name
        assert ("--freeze-LM" in f) == case["frozen_decoder"], name
        assert "--language-model-type" in f and "--tokenizer-prompt-format" in f, name
    if "--pipeline-model-parallel-layout" in f:
        layout = f["--pipeline-model-parallel-layout"]
        rejected(layout.replace("L", "|L"), pp, cfg.num_layers, "must be divisible by pipeline_model_parallel_size")
        rejected(layout, pp, cfg.num_layers + 1, "Number of decoder layers")
    if "--pipeline-model-parallel-layout" in f and vpp == 1 and pp > 2:
        d = case["decoder"][0]
        try:
            first_last = config(f, num_layers_in_first_pipeline_stage=d[0], num_layers_in_last_pipeline_stage=d[-1])
            rebuilt = layers_by_stage(first_last, pp, 1)
        except (ValueError, AssertionError):
            rebuilt = None
        assert rebuilt != case["decoder"], f"{name}: the first/last flags would have said {d}"
    return name


if __name__ == "__main__":
    launch.check_all("megatron", check)
