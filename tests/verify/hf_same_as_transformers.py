"""The Hugging Face adapter's stages are transformers' own model, cut.

    python hf_same_as_transformers.py

For each family of python/mpipec/torch/hf.py, on microbatches with several images: the
adapter's whole model and its stages chained across every cut give the loss that the family's
ForConditionalGeneration computes from the same inputs, and the same gradient for every
parameter. Prints `ok` when they do (tests/verify.rs).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from mpipec.torch import hf  # noqa: E402

VISION, TEXT = 3, 4
# Cuts inside the vision tower, at the seam, and inside the decoder.
STAGES = [(0, 2), (2, 3), (3, 5), (5, 7)]


def grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def check(family):
    config = dict(family=family, seed=1, vision_layers=VISION, text_layers=TEXT, micro_batch_size=1,
                  kinds=[{"trainable": True}] * (VISION + TEXT))
    full = hf.full_model(config)
    failures = []
    for mb in range(3):
        b = hf.batch(mb, 0, config)
        inputs = dict(input_ids=b["input_ids"], pixel_values=b["pixel_values"], labels=b["labels"])
        if "image_grid_thw" in b:
            inputs.update(image_grid_thw=b["image_grid_thw"], mm_token_type_ids=b["mm_token_type_ids"])
        full.zero_grad()
        expected = full(**inputs).loss
        expected.backward()
        want = grads(full)
        stages = [hf.build(range(*s), config["kinds"], config) for s in STAGES]
        x = None
        for stage in stages:
            x = stage(x, b)
        got_loss = hf.loss(x, b)
        got_loss.backward()
        got = {}
        for stage in stages:
            got.update(grads(stage))
        got_loss, expected = float(got_loss.detach()), float(expected.detach())
        if abs(got_loss - expected) > 1e-6 * abs(expected):
            failures.append(f"{family} mb {mb}: loss {got_loss} against transformers' {expected}")
        # transformers' model holds modules the family does not use (CLIP's post-norm): no gradient there.
        if set(got) != set(want):
            failures.append(f"{family} mb {mb}: gradients for {sorted(set(got) ^ set(want))[:3]} on one side only")
        for name in set(got) & set(want):
            if not torch.allclose(got[name], want[name], rtol=1e-5, atol=1e-7):
                failures.append(f"{family} mb {mb}: gradient of {name} differs")
        images = b["image_grid_thw"].tolist() if "image_grid_thw" in b else list(b["pixel_values"].shape)
        print(f"{family} mb {mb}: {b['input_ids'].shape[1]} tokens, images {images}, loss {expected:.6f}")
    return failures


failures = [f for family in sorted(hf.FAMILIES) for f in check(family)]
print("\n".join(failures) if failures else "ok")
sys.exit(1 if failures else 0)
