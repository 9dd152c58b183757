"""Checks mpipec's Megatron-LM launch scripts with megatron-core's own code (0.16.1, on a CPU).

Each case's launch.sh is run as written with torchrun replaced by a recording shim, and the
flags it passes go through megatron-core:
- the microbatch count, from ConstantNumMicroBatchesCalculator;
- the stage split, by TransformerConfig (its __post_init__ validates uneven first/last stages and
  the layout) and get_num_layers_to_build / PipelineParallelLayerLayout, which must give exactly
  the plan's layers on every (pipeline rank, virtual stage);
- where mpipec chose a layout string over the first/last flags, TransformerConfig must reject
  the first/last form of the same split (so the layout was needed), and a layout that breaks
  the two rules mpipec's writer keeps (one stage per pipeline rank and virtual stage, every
  decoder layer once) is rejected by PipelineParallelLayerLayout for exactly that reason.
Megatron-LM's rules that live outside megatron-core (its parser's flags, validate_args) are
checked in Rust, by check_megatron in tests/backends.rs.
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
    argv, _ = launch.run(case["launch"], ENV)
    _, _, args = launch.split_torchrun(argv)
    f = launch.flags(args)
    pp = int(f["--pipeline-model-parallel-size"])
    calc = ConstantNumMicroBatchesCalculator(int(f["--global-batch-size"]), int(f["--micro-batch-size"]), case["dp"],
                                             False, 0)
    assert calc.get() == case["microbatches"], (name, calc.get())
    # The split, by megatron-core itself.
    cfg = config(f, **split_of(f))
    vpp = cfg.virtual_pipeline_model_parallel_size or 1
    if cfg.pipeline_model_parallel_layout is not None:
        cfg.pipeline_model_parallel_layout.validate_layer_layout(cfg.num_layers, 0)
    got = layers_by_stage(cfg, pp, vpp)
    assert got == case["decoder"], f"{name}: Megatron builds {got}, the plan has {case['decoder']}"
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
