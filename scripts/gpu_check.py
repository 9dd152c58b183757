"""What scripts/gpu-check runs once it has found CUDA: python scripts/gpu_check.py MPIPEC."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from mpipec.torch import Executor, adapter, devices, hf, load_plan, stage_ids

# std::hardware by the GPU's name.
HARDWARE = {"H200": "h200_sxm", "H100": "h100_sxm", "A100": "a100_sxm_80gb"}
# Qwen2.5-VL-7B-Instruct's config.json sizes, one block and one layer.
VISION = dict(hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, patch_size=14,
              temporal_patch_size=2, spatial_merge_size=2, window_size=112, fullatt_block_indexes=[0])
TEXT = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]})
# One 896 x 896 image: 64 x 64 patches of 14 px, 4096 encoder tokens, 1024 after the 2 x 2 merge.
GRID, SEQ = [1, 64, 64], 2048
# transformers runs its layers eagerly (no torch.compile): fused_kernels = false.
PLAN = """use std::hardware::{hw};
use std::models::qwen2_5_vit;
decoder qwen2_5_7b {{
    layers = 1; hidden = 3584; ffn = 18944; heads = 28; kv_heads = 4; head_dim = 128;
    vocab = 152064; mlp = swiglu; tied_embeddings = false;
}}
model vlm {{ enc = qwen2_5_vit {{ layers = 1; frozen = false; }} llm = qwen2_5_7b; }}
cluster {{ hardware = {hw}; devices = 2; pp = 2; fused_kernels = false; }}
batch {{ microbatches = 4; seq_len = {seq}; image_tokens = {image}; }}
cut enc + llm;
schedule 1f1b;
"""


def predicted(mpipec, hw, out):
    """The cost model's forward and backward seconds of each stage, and its step."""
    with open(os.path.join(out, "gpu.mpipe"), "w") as f:
        f.write(PLAN.format(hw=hw, seq=SEQ, image=GRID[1] * GRID[2]))
    built = subprocess.run([mpipec, "build", os.path.join(out, "gpu.mpipe"), "-o", os.path.join(out, "build"), "--target", "torch"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"error: mpipec build of the check's plan failed:\n{built.stderr}")
    with open(os.path.join(out, "build", "timeline.json")) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    dur = {e["name"]: e["dur"] * 1e-6 for e in events if e.get("ph") == "X"}
    with open(os.path.join(out, "build", "report.json")) as f:
        step = json.load(f)["step_time_s"]
    return [(dur[f"forward s{s} mb0"], dur[f"backward s{s} mb0"]) for s in (0, 1)], step


def config():
    kinds = [{"encoder": True, "trainable": True, "part_first": True, "part_last": True},
             {"encoder": False, "trainable": True, "part_first": True, "part_last": True}]
    text = SEQ - GRID[1] * GRID[2] // 4 - 4
    return dict(family="qwen2_5_vl", seed=1, vision_layers=1, text_layers=1, micro_batch_size=1, kinds=kinds,
                vision=VISION, text=TEXT, grids=[GRID], text_tokens=text, attention="sdpa")


def timed(fn, device, repeats=5):
    """Median seconds of fn() on `device` after two warm-up calls: CUDA events on a GPU, the wall
    clock elsewhere (the CPU smoke run of this script's code paths)."""
    times = []
    for k in range(repeats + 2):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            seconds = cuda_time_since(start)
        else:
            begin = time.perf_counter()
            fn()
            seconds = time.perf_counter() - begin
        if k >= 2:
            times.append(seconds)
    return statistics.median(times)


def measured(c, device):
    """Forward and backward seconds of the vision block's stage and the decoder layer's, bf16."""
    stages = [hf.build(range(0, 1), c["kinds"], c).to(device, torch.bfloat16), hf.build(range(1, 2), c["kinds"], c).to(device, torch.bfloat16)]
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in hf.batch(0, 0, c).items()}
    batch["pixel_values"] = batch["pixel_values"].to(torch.bfloat16)
    features = stages[0](None, batch).detach()
    runs = [lambda: stages[0](None, batch), lambda: hf.loss(stages[1](features.requires_grad_(True), batch), batch)]
    out = []
    for run in runs:
        forward = timed(run, device)
        backward = timed(lambda: run().float().sum().backward(), device) - forward
        out.append((forward, backward))
    return out


# The 7B decoder layer's matrix multiplies (name, output features, input features) and the token
# counts a microbatch brings: small and skinny products are where a single efficiency is wrong.
GEMMS = [("qkv", 3584 + 2 * 512, 3584), ("attn out", 3584, 3584), ("gate+up", 2 * 18944, 3584), ("down", 3584, 18944),
         ("vision qkv", 3 * 1280, 1280), ("vision mlp", 3420, 1280)]
TOKENS = [256, 1024, 2048, 8192]
# Causal attention's sequence lengths, 28 heads of 128 as the 7B decoder.
ATTENTION = [2048, 8192, 32768]
PEAK_BF16 = {"h200_sxm": 989.5e12, "h100_sxm": 989.5e12, "a100_sxm_80gb": 312e12}


def kernels(hw, device):
    """Measured bf16 throughput of the layers' matrix multiplies and of causal attention (SDPA),
    as a fraction of the datasheet's dense peak that std::hardware declares."""
    peak = PEAK_BF16[hw]
    print(f"{'kernel':<22} {'tokens':>7} {'TFLOP/s':>8} {'of peak':>8}")
    for name, n, k in GEMMS:
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        for m in TOKENS:
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            rate = 2 * m * n * k / timed(lambda: x @ w.t(), device, repeats=20)
            print(f"{name:<22} {m:>7} {rate * 1e-12:>8.1f} {rate / peak:>8.1%}")
    for seq in ATTENTION:
        q, kk, v = (torch.randn(1, 28, seq, 128, device=device, dtype=torch.bfloat16) for _ in range(3))
        seconds = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True), device, repeats=10)
        # Causal: half of the 4 * seq^2 * head_dim * heads multiply-adds of full attention.
        rate = 2 * seq * seq * 128 * 28 / seconds
        print(f"{'causal attention':<22} {seq:>7} {rate * 1e-12:>8.1f} {rate / peak:>8.1%}")


def pipeline_worker(rank, rendezvous, plan_path, c, result):
    os.environ["LOCAL_RANK"] = str(rank)
    device = devices.init("nccl", f"file://{rendezvous}", rank, 2)
    plan = load_plan(plan_path)
    groups = devices.groups(plan)
    modules = {s: m.to(torch.bfloat16) for s, m in adapter.stage_modules(hf, plan, stage_ids(plan, rank), c, device).items()}
    ex = Executor(plan, rank, modules, hf.loss, groups, device=device)

    def microbatches(step):
        def one(j):
            b = hf.batch(j, step, c)
            return dict(b, pixel_values=b["pixel_values"].to(torch.bfloat16))

        return one

    times = []
    for step in range(4):
        torch.distributed.barrier()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        ex.step(microbatches(step))
        times.append(cuda_time_since(start))
    if rank == 0:
        result.put(statistics.median(times[1:]))
    torch.distributed.destroy_process_group()


def cuda_time_since(start):
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e-3


def main(mpipec):
    name = torch.cuda.get_device_name()
    hw = next((h for key, h in HARDWARE.items() if key in name), None)
    if hw is None:
        sys.exit(f"error: no std::hardware matches the GPU `{name}` (known: {', '.join(HARDWARE)})")
    out = tempfile.mkdtemp(prefix="mpipec-gpu-check-")
    model, step = predicted(mpipec, hw, out)
    c = config()
    got = measured(c, torch.device("cuda"))
    print(f"{name} as std::hardware::{hw}; torch {torch.__version__}; bf16; Qwen2.5-VL-7B sizes, seq {SEQ}, one {GRID[1] * 14} px image")
    print(f"{'layer':<34} {'fwd measured':>13} {'fwd model':>10} {'bwd measured':>13} {'bwd model':>10}")
    for label, (mf, mb), (pf, pb) in zip(("vision block (+ patch embed, merger)", "decoder layer (+ embed, head, loss)"), got, model):
        print(f"{label:<34} {mf * 1e3:>10.2f} ms {pf * 1e3:>7.2f} ms {mb * 1e3:>10.2f} ms {pb * 1e3:>7.2f} ms")
    kernels(hw, torch.device("cuda"))
    if torch.cuda.device_count() < 2:
        print("one GPU: the 2-rank pipeline needs two")
        return
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(pipeline_worker, args=(os.path.join(out, "rendezvous"), os.path.join(out, "build", "plan.json"), c, queue),
                       nprocs=2, join=True, start_method="spawn")
    print(f"2-rank 1f1b pipeline (NCCL, 4 microbatches): step {queue.get() * 1e3:.1f} ms measured, {step * 1e3:.1f} ms simulated")


if __name__ == "__main__":
    main(sys.argv[1])
