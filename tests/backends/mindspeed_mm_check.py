"""Checks mpipec's MindSpeed-MM launch scripts and model.json against MindSpeed-MM's documented
rules (torch_npu needs CANN and MindSpeed-MM is not on PyPI, so its code cannot run here):
- model.json is read the way mindspeed_mm/configs/config.py:MMConfig reads it (json.loads);
- mindspeed_mm/models/vlm_model.py: every pipeline_num_layers list has pp entries, or with VPP is
  [vpp][pp] (len * len[0] == pp * vpp); the checkpoint converters' check_pp_config: the list sums
  to the module's num_layers;
- MindSpeed-MM's arguments patch: --virtual-pipeline-model-parallel-size equals
  len(text_decoder.pipeline_num_layers) and VP_SIZE is exported with it
  (docs/features/virtual_pipeline_parallel.md); the deprecated
  --num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank are absent;
- the vision encoder's layers all come before the first LLM layer in stage order
  (D0V0 -> D1V0 -> ... -> D0V1 -> ...);
- Megatron's batch rules (megatron/core/num_microbatches_calculator.py) and the
  environment of examples/qwen2.5vl/finetune_qwen2_5_vl_7b.sh;
and that the lists are exactly the plan's split.
Usage: python3 mindspeed_mm_check.py cases.json
"""

import json

import launch

ENV = {"MINDSPEED_MM": "/opt/MindSpeed-MM", "MM_DATA": "/data/data.json", "ASCEND_HOME": "/nonexistent"}
ASCEND_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "HCCL_CONNECT_TIMEOUT": "1200", "TASK_QUEUE_ENABLE": "2",
              "CPU_AFFINITY_CONF": "1", "ASCEND_GLOBAL_LOG_LEVEL": "3"}


def stage_order(layers, vpp):
    """A pipeline_num_layers value as one list in stage order."""
    return [n for chunk in layers for n in chunk] if vpp > 1 else list(layers)


def check_list(name, module, pp, vpp):
    layers = module["pipeline_num_layers"]
    if vpp > 1:
        assert len(layers) * len(layers[0]) == pp * vpp and all(len(c) == pp for c in layers), (name, layers)
    else:
        assert len(layers) == pp and all(isinstance(n, int) for n in layers), (name, layers)
    assert sum(stage_order(layers, vpp)) == module["num_layers"], f"{name}: {layers} != {module['num_layers']}"
    return stage_order(layers, vpp)


def check(case):
    name = case["name"]
    argv, env = launch.run(case["launch"], ENV)
    options, script, args = launch.split_torchrun(argv)
    assert options["--nproc-per-node"] == str(case["world"]) and options["--nnodes"] == "1", (name, options)
    assert script == f"{ENV['MINDSPEED_MM']}/pretrain_vlm.py", (name, script)
    for k, v in ASCEND_ENV.items():
        assert env.get(k) == v, (name, k, env.get(k))
    f = launch.flags(args)
    assert f["--distributed-backend"] == "nccl" and f["--mm-data"] == ENV["MM_DATA"], name
    assert "--num-layers-per-virtual-pipeline-stage" not in f and "--num-virtual-stages-per-pipeline-rank" not in f
    tp, pp = int(f["--tensor-model-parallel-size"]), int(f["--pipeline-model-parallel-size"])
    world = case["world"]
    assert world % (tp * pp) == 0, name
    dp = world // (tp * pp)
    gbs, mbs = int(f["--global-batch-size"]), int(f["--micro-batch-size"])
    assert gbs % (mbs * dp) == 0 and gbs // (mbs * dp) == case["microbatches"], name
    with open(f["--mm-model"]) as fh:
        model = json.loads(fh.read())
    vpp = int(f.get("--virtual-pipeline-model-parallel-size", 1))
    if vpp > 1:
        assert env.get("VP_SIZE") == str(vpp), name
        assert len(model["text_decoder"]["pipeline_num_layers"]) == vpp, name
    decoder = check_list(name, model["text_decoder"], pp, vpp)
    assert model["text_decoder"]["pipeline_num_layers"] == case["decoder_flat"], name
    if case["vlm"]:
        vit = model["image_encoder"]["vision_encoder"]
        encoder = check_list(name, vit, pp, vpp)
        assert vit["pipeline_num_layers"] == case["encoder_flat"], name
        last_vit = max(i for i, n in enumerate(encoder) if n > 0)
        first_llm = min(i for i, n in enumerate(decoder) if n > 0)
        assert last_vit <= first_llm, f"{name}: ViT layers after the first LLM layer: {encoder} / {decoder}"
        assert vit["freeze"] == case["frozen_encoder"], name
    else:
        assert model["image_encoder"] is None, name
    return name


if __name__ == "__main__":
    launch.check_all("mindspeed-mm", check)
