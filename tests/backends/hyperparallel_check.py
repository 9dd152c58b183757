"""Checks mpipec's HyperParallel trainer configs and per-rank orders against HyperParallel's
documented keys and rules (its trainer is not on PyPI):
- hyper_parallel/trainer/config.py (mindspore-ai/hyper-parallel 427916e): the strict three-tier
  schema (top-level keys exactly model/data/train), the fields of ModelConfig, DataConfig,
  TrainConfig, AcceleratorConfig, MixedPrecisionConfig and GradientCheckpointingConfig;
  pp_schedule gpipe or 1f1b (mpipe from examples/qwen3_vl_30b_a3b_instruct/train_pp_mpipe.yaml,
  51e4a86, with its pp_mpipe_* keys and data.load: single); pp_layer_split of length
  pp * pp_vpp summing to num_hidden_layers; world = dp_replicate * dp_shard * cp * tp * pp;
  global_batch_size divisible by pp_micro_batch_num, and with data.load single equal to
  pp_micro_batch_num * micro_batch_size * dp_shard;
- docs/mpipe_transpose.md, mpipe/schedule.py and tests/ut/core/pipeline_parallel/
  test_mpipe_transpose.py and test_interleaved_less_memory.py for exec_order.json (written for
  pp_schedule mpipe only): NT = min(PP, MB), overflow "full" owns micro m on rank m % NT, the
  prefix (stage -1) loads and encodes the owned micros and ships data then features i -> 0,
  no tower backward when it is frozen, owner-backward (a broadcast first, GRAD_SEND from rank
  0, GRAD_RECV_WITH_BACKWARD on the owners, GRAD_REDUCE last on every rank) when it trains; the
  body's warmup depth, with and without pp_less_memory; every transfer meets its counterpart
  at the same position of the two ranks' queues (scheduler.py's parse_and_validate and the
  HCCL queue order);
and that stage split, microbatches and parallel sizes are exactly the plan's.
Usage: python hyperparallel_check.py cases.json  (needs PyYAML)
"""

import collections
import json
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


# MetaStepType (core/pipeline_parallel/utils.py) and MpipeStepType (mpipe/step_types.py, with the
# owner-backward steps of the ttachon/hyper-parallel version).
STEP_TYPES = {"DATA_LOAD", "DATA_SEND", "DATA_RECV", "FWD", "BWD", "FWD_SEND", "FWD_RECV", "BWD_SEND",
              "BWD_RECV", "MPIPE_PARAM_BROADCAST", "MPIPE_TRANSPOSE_FWD", "MPIPE_FWD_SEND", "MPIPE_FWD_RECV",
              "MPIPE_GRAD_SEND", "MPIPE_GRAD_RECV_WITH_BACKWARD", "MPIPE_GRAD_REDUCE"}


def counterpart(step, pp, nt):
    """(peer rank, the step it must post at the same queue position), or None for local steps."""
    kind, mb, stage = step["type"], step["micro_index"], step["stage_index"]
    if stage == -1:
        if kind in ("DATA_SEND", "MPIPE_FWD_SEND"):
            return 0, (kind.replace("SEND", "RECV"), mb, -1)
        if kind in ("DATA_RECV", "MPIPE_FWD_RECV"):
            return mb % nt, (kind.replace("RECV", "SEND"), mb, -1)
        return None
    if kind == "MPIPE_GRAD_SEND":
        return mb % nt, ("MPIPE_GRAD_RECV_WITH_BACKWARD", mb, 0)
    if kind == "MPIPE_GRAD_RECV_WITH_BACKWARD":
        return 0, ("MPIPE_GRAD_SEND", mb, 0)
    down = {"DATA_SEND": "DATA_RECV", "FWD_SEND": "FWD_RECV", "BWD_RECV": "BWD_SEND"}
    up = {"DATA_RECV": "DATA_SEND", "FWD_RECV": "FWD_SEND", "BWD_SEND": "BWD_RECV"}
    if kind in down:
        return (stage + 1) % pp, (down[kind], mb, stage + 1)
    if kind in up:
        return (stage - 1) % pp, (up[kind], mb, stage - 1)
    return None


def check_order(case, order, acc):
    """The rules of ScheduleMPipeTranspose (overflow full, owner-backward for a trainable tower)
    over ScheduleInterleaved1F1B, re-checked on the emitted lists."""
    name = case["name"]
    pp, m, vpp = case["pp"], case["microbatches"], case["vpp"]
    nt = min(pp, m)
    assert order["format"] == "hyperparallel-exec-order" and len(order["ranks"]) == pp, name
    steps = {r["rank"]: r["steps"] for r in order["ranks"]}
    for rank_steps in steps.values():
        for s in rank_steps:
            assert set(s) == {"type", "micro_index", "stage_index"}, (name, s)
            assert s["type"] in STEP_TYPES, f"{name}: HyperParallel has no step {s['type']}"
    # parse_and_validate, and the queue order HCCL needs: between two ranks the n-th transfer
    # posted by one meets the n-th posted by the other.
    queues = collections.defaultdict(list)
    for rank, rank_steps in steps.items():
        for s in rank_steps:
            pair = counterpart(s, pp, nt)
            if pair:
                queues[(rank, pair[0])].append(((s["type"], s["micro_index"], s["stage_index"]), pair[1]))
    for (a, b), mine in queues.items():
        theirs = [posted for posted, _ in queues.get((b, a), [])]
        assert [want for _, want in mine] == theirs, f"{name}: transfers {a}->{b} do not meet in order"
    computed = collections.Counter()
    for rank, rank_steps in steps.items():
        for s in rank_steps:
            if s["type"] in ("FWD", "BWD"):
                assert s["stage_index"] % pp == rank, (name, rank, s)
                computed[(s["type"], s["stage_index"], s["micro_index"])] += 1
    trainable = case["trainable_encoder"]
    everything = {(t, b, mb): 1 for t in ("FWD", "BWD") for b in range(pp * vpp) for mb in range(m)}
    assert computed == collections.Counter(everything), name
    # Warmup: forwards before the first backward, (V-1)*R + 2(P-1-i) or with pp_less_memory
    # (V-1)*R + (P-1-i), capped at V*M; R the first round's microbatches.
    rounds = max(1, m // pp)
    first_round = m if m < pp else pp + (m % pp) // rounds + (1 if (m % pp) % rounds else 0)
    for rank, rank_steps in steps.items():
        compute = [s["type"] for s in rank_steps if s["type"] in ("FWD", "BWD")]
        depth = pp - 1 - rank
        warmup = min((vpp - 1) * first_round + (depth if acc["pp_less_memory"] else 2 * depth), vpp * m)
        assert compute.index("BWD") == (warmup + 1 if warmup < vpp * m else warmup), (name, rank)
    for rank, rank_steps in steps.items():
        prefix = [s for s in rank_steps if s["stage_index"] == -1]
        assert rank_steps[:len(prefix)] == prefix, f"{name}: rank {rank}'s prefix is not first"
        owned = [mb for mb in range(m) if mb % nt == rank]
        assert [s["micro_index"] for s in prefix if s["type"] == "MPIPE_TRANSPOSE_FWD"] == owned, (name, rank)
        broadcast = [s for s in prefix if s["type"] == "MPIPE_PARAM_BROADCAST"]
        assert broadcast == ([prefix[0]] if trainable else []), f"{name}: rank {rank} broadcast"
        shipped = owned if rank else [mb for mb in range(m) if mb % nt]
        way = "SEND" if rank else "RECV"
        transfers = [(s["type"], s["micro_index"]) for s in prefix if s["type"].endswith(way)]
        assert transfers == [(f"DATA_{way}", mb) for mb in shipped] + [(f"MPIPE_FWD_{way}", mb) for mb in shipped], \
            f"{name}: rank {rank} ships data then features, each in microbatch order"
        tail = [(s["type"], s["micro_index"]) for s in rank_steps if s["type"].startswith("MPIPE_GRAD")]
        if trainable:
            grads = [("MPIPE_GRAD_SEND", mb) for mb in shipped] if rank == 0 else \
                [("MPIPE_GRAD_RECV_WITH_BACKWARD", mb) for mb in owned]
            assert tail == grads + [("MPIPE_GRAD_REDUCE", None)], (name, rank, tail)
            assert [(s["type"], s["micro_index"]) for s in rank_steps[-len(tail):]] == tail, (name, rank)
        else:
            assert not tail, f"{name}: a frozen tower has no backward"


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
    if mpipe:
        with open(case["exec_order"]) as f:
            check_order(case, json.load(f), acc)
    return name


if __name__ == "__main__":
    launch.check_all("hyperparallel", check)
