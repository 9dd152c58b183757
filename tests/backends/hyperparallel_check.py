"""Checks mpipec's HyperParallel trainer configs against HyperParallel's documented keys and
rules (its trainer is not on PyPI; PyYAML reads the config as the trainer does):
- hyper_parallel/trainer/config.py (mindspore-ai/hyper-parallel 427916e): the strict three-tier
  schema (top-level keys exactly model/data/train), the fields of ModelConfig, DataConfig,
  TrainConfig, AcceleratorConfig, MixedPrecisionConfig and GradientCheckpointingConfig;
  pp_schedule gpipe or 1f1b (mpipe from examples/qwen3_vl_30b_a3b_instruct/train_pp_mpipe.yaml,
  51e4a86, with its pp_mpipe_* keys and data.load: single); pp_layer_split of length
  pp * pp_vpp summing to num_hidden_layers; world = dp_replicate * dp_shard * cp * tp * pp;
  global_batch_size divisible by pp_micro_batch_num, and with data.load single equal to
  pp_micro_batch_num * micro_batch_size * dp_shard;
- exec_order.json is written for pp_schedule mpipe only (its rules are checked in Rust, by
  check_hyperparallel_order in tests/backends.rs);
and that stage split, microbatches and parallel sizes are exactly the plan's.
Usage: python hyperparallel_check.py cases.json  (needs PyYAML)
"""

import os

import yaml

import launch

MODEL = {"name", "weights_path", "tokenizer_path", "freeze_modules", "tp_plan", "cp_modules", "ep_modules",
         "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
         "vocab_size", "max_position_embeddings", "config_overrides"}
DATA = {"type", "train_path", "subset", "max_seq_len", "text_key", "train_size", "template", "image_key",
        "messages_key", "image_token_id", "video_token_id", "vl_video", "vl_grid_t", "vl_grid_h", "vl_grid_w",
        "streaming", "num_workers", "prefetch_factor", "pin_memory", "shuffle", "load"}
TRAIN = {"max_steps", "num_train_epochs", "global_batch_size", "micro_batch_size", "seed", "backend", "init_device",
         "comm_backend", "local_rank", "accelerator", "mixed_precision", "gradient_checkpointing", "optimizer",
         "checkpoint", "logging", "tensorboard", "wandb", "profile", "memory_monitor", "moe_monitor", "eval", "debug"}
ACCELERATOR = {"dp", "dp_replicate", "dp_shard", "tp", "cp", "pp", "pp_micro_batch_num", "pp_schedule", "pp_vpp",
               "pp_layer_split", "ep", "etp", "moe_token_dispatcher_type", "npu_nums_per_device", "zero_stage",
               "reshard_after_forward", "async_cp", "ulysses_degree", "comm_fusion", "cpu_offload",
               # train_pp_mpipe.yaml
               "pp_mpipe_transpose_layers", "pp_mpipe_transpose_overflow", "pp_mpipe_owner_backward",
               "pp_less_memory", "fsdp_forward_prefetch", "fsdp_backward_prefetch"}
MIXED = {"enabled", "param_dtype", "reduce_dtype", "output_dtype"}
ENV = {"HYPER_PARALLEL": "/opt/hyper-parallel"}


def subset(name, what, keys, allowed):
    unknown = set(keys) - allowed
    assert not unknown, f"{name}: {what} has keys HyperParallel's config does not: {sorted(unknown)}"


def check_config(case, cfg):
    name = case["name"]
    assert set(cfg) == {"model", "data", "train"}, (name, set(cfg))
    subset(name, "model", cfg["model"], MODEL)
    subset(name, "data", cfg["data"], DATA)
    train = cfg["train"]
    subset(name, "train", train, TRAIN)
    acc = train["accelerator"]
    subset(name, "train.accelerator", acc, ACCELERATOR)
    subset(name, "train.mixed_precision", train["mixed_precision"], MIXED)
    assert train["gradient_checkpointing"]["activation_checkpoint"] in ("off", "full", "selective"), name
    pp, vpp = acc.get("pp", 1), acc.get("pp_vpp", 1)
    world = acc.get("dp_replicate", 1) * acc["dp_shard"] * acc.get("cp", 1) * acc.get("tp", 1) * pp
    assert world == case["devices"], (name, world)
    assert (pp, acc["dp_shard"], acc.get("tp", 1)) == (case["pp"], case["dp"], case["tp"]), name
    if pp > 1:
        schedule = acc["pp_schedule"]
        assert schedule in ("gpipe", "1f1b", "mpipe"), (name, schedule)
        assert acc["pp_micro_batch_num"] == case["microbatches"], name
        split = acc["pp_layer_split"]
        assert len(split) == pp * vpp and sum(split) == cfg["model"]["num_hidden_layers"], (name, split)
        assert split == case["decoder_stages"], (name, split, case["decoder_stages"])
        assert vpp == case["vpp"], name
        gbs = train["global_batch_size"]
        assert gbs % acc["pp_micro_batch_num"] == 0, name
        if cfg["data"].get("load") == "single":
            assert gbs == acc["pp_micro_batch_num"] * train["micro_batch_size"] * acc["dp_shard"], name
        if schedule == "mpipe":
            assert case["transpose"], name
            assert acc["pp_mpipe_transpose_overflow"] in ("full", "min"), name
            assert acc["pp_mpipe_owner_backward"] == case["trainable_encoder"], name
            # a 1f1b body is the one-chunk interleaved generator with the shallow warmup
            assert acc["pp_less_memory"] == (vpp == 1), name
            frozen = "model.visual" in cfg["model"].get("freeze_modules", [])
            assert frozen == (not case["trainable_encoder"]), name


def check(case):
    argv, _ = launch.run(case["launch"], ENV)
    options, script, args = launch.split_torchrun(argv)
    name = case["name"]
    assert options["--nproc-per-node"] == str(case["devices"]), (name, options)
    entry = "scripts/train_vl.py" if case["vlm"] else "scripts/train_lm.py"
    assert script == f"{ENV['HYPER_PARALLEL']}/{entry}" and args == [case["config"]], (name, script, args)
    with open(case["config"]) as f:
        cfg = yaml.safe_load(f)
    check_config(case, cfg)
    acc = cfg["train"]["accelerator"]
    mpipe = acc.get("pp_schedule") == "mpipe"
    assert os.path.exists(case["exec_order"]) == mpipe, f"{name}: exec_order.json goes with pp_schedule mpipe"
    return name


if __name__ == "__main__":
    launch.check_all("hyperparallel", check)
