"""Checks mpipec's MindFormers configs with MindFormers' and MindSpore's own code (mindformers
1.9.0, mindspore 2.9.0, on a CPU).

For each case:
- launch.sh is run as written with msrun replaced by a recording shim, and the command line is
  parsed by msrun's own parser (mindspore/parallel/cluster/run.py:get_args);
- config.yaml goes through MindFormerConfig (mindformers/tools/register/config.py), the context
  validators (mindformers/core/context/validators.py:execute_validator),
  mindspore.set_auto_parallel_context(**parallel, pipeline_stages=pp) as
  mindformers/core/context/parallel.py passes it, and tools/check_rules.py's _check_parallel
  (dp*mp*cp*pp == device count: accepted at the plan's count, rejected at twice it) and
  _check_recompute;
- LayerSetting (parallel_core/training_graph/transformer/utils.py) turns `offset` into layers per
  stage and sets each layer's pipeline stage, which must be exactly the plan's;
- the model config goes through convert_to_transformer_config
  (parallel_core/transformer_config_utils.py), whose TransformerConfig holds zero_bubble_v's rules,
  and BaseTrainer._check_global_batch_size_for_auto_parallel (trainer/base_trainer.py) computes
  the global batch, which must be the plan's.
Usage: python mindformers_check.py cases.json  (run in a scratch directory: MindFormers logs to ./output)
"""

import copy
import os
import sys
import types
from unittest import mock

import mindspore as ms
from mindformers.core.context.validators import execute_validator
from mindformers.modules.transformer.transformer import TransformerOpParallelConfig, TransformerRecomputeConfig
from mindformers.parallel_core.training_graph.transformer.utils import LayerSetting
from mindformers.parallel_core.transformer_config_utils import convert_to_transformer_config
from mindformers.tools.check_rules import _check_parallel, _check_recompute
from mindformers.tools.register.config import MindFormerConfig
from mindformers.trainer.base_trainer import BaseTrainer
from mindspore.parallel.cluster.run import get_args

import launch

ENV = {"MINDFORMERS": "/opt/mindformers"}


def check_launch(case):
    argv, _ = launch.run(case["launch"], ENV, launcher="MSRUN")
    with mock.patch.object(sys, "argv", ["msrun", *argv]):
        args = get_args()
    name = case["name"]
    assert args.worker_num == case["devices"] and args.local_worker_num == case["devices"], (name, args)
    assert (args.master_addr, args.master_port, args.node_rank) == ("127.0.0.1", 8118, 0), (name, args)
    assert args.join is True or args.join == "True", (name, args.join)
    assert args.task_script == f"{ENV['MINDFORMERS']}/run_mindformer.py", (name, args.task_script)
    script_args = args.task_script_args
    assert script_args[:2] == ["--config", case["config"]] and script_args[2:4] == ["--run_mode", "train"], script_args


def check_config(case):
    name = case["name"]
    devices = case["devices"]
    cfg = MindFormerConfig(case["config"])
    execute_validator(cfg)
    pc = cfg.parallel_config
    pp = pc.pipeline_stage
    assert (pc.data_parallel, pc.model_parallel, pp) == (case["dp"], case["tp"], case["pp"]), name
    assert pc.micro_batch_num == case["microbatches"], name
    ms.reset_auto_parallel_context()
    kwargs = dict(cfg.parallel)
    if pp > 1:
        kwargs["pipeline_stages"] = pp
    ms.set_auto_parallel_context(**kwargs)
    assert ms.get_auto_parallel_context("pipeline_scheduler") == case["scheduler"], name
    os.environ["RANK_SIZE"] = str(devices)
    _check_parallel(cfg)
    _check_recompute(cfg)
    os.environ["RANK_SIZE"] = str(2 * devices)
    try:
        _check_parallel(cfg)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{name}: _check_parallel accepted {2 * devices} devices")
    mc = cfg.model.model_config
    vpp = mc.pp_interleave_num
    parallel = TransformerOpParallelConfig(recompute=TransformerRecomputeConfig(**cfg.recompute_config), **dict(pc))
    setting = LayerSetting(mc.num_hidden_layers, mc.offset, parallel, vpp)
    stages = case["decoder_stages"]
    expected = [stages[c * pp:(c + 1) * pp] for c in range(vpp)]
    assert setting.layer_list.tolist() == expected, f"{name}: LayerSetting {setting.layer_list.tolist()} != {expected}"
    # The rank each layer is placed on, as LayerSetting sets it on the layer's cell (for
    # zero_bubble_v the second chunk runs back up the ranks).
    ranks = []
    for layer_id in range(mc.num_hidden_layers):
        cell = types.SimpleNamespace()
        setting.set_pipeline_stage(cell, layer_id)
        ranks.append(cell.pipeline_stage)
    assert ranks == case["decoder_layer_ranks"], f"{name}: ranks {ranks} != {case['decoder_layer_ranks']}"
    model_config = copy.deepcopy(dict(mc))
    model_config["parallel_config"] = copy.deepcopy(dict(pc))
    # The multimodal keys configure the wrapper around the LLM, not its TransformerConfig.
    convert_to_transformer_config(
        model_config,
        is_mla_model="kv_lora_rank" in model_config,
        not_convert_whitelist={"freeze_vision", "freeze_llm", "vision_model"},
    )
    trainer = types.SimpleNamespace(
        config=copy.deepcopy(cfg), get_pipeline_stages=lambda: pp, _reset_wrapper_for_pipeline_parallel=lambda: None
    )
    BaseTrainer._check_global_batch_size_for_auto_parallel(trainer)
    assert trainer.global_batch_size == case["global_batch"], (name, trainer.global_batch_size)
    if case["vlm"]:
        assert mc.freeze_vision == case["frozen_encoder"], name


def check(case):
    check_launch(case)
    check_config(case)
    return case["name"]


if __name__ == "__main__":
    launch.check_all("mindformers", check)
