"""The host's speed, read off a fixed kernel: a shared CPU host runs the same work tens of
percent faster or slower from one minute to the next (docs/costs.md), so a profile taken a few
minutes before a run can be off by that much whatever the model. `mpipec profile` and
`mpipec verify --profile` both time this kernel between their steps, so that a prediction can
be set beside a run at the host's speed then: the ratio of the two says how fast the host ran,
and says nothing of the plan, whose own instructions are not part of it.

The kernel is a transformer block's forward and backward (attention and MLP, width 64, 32
tokens, fp32) on one thread, timed after an untimed pass (the first after a step runs on the
caches the step left) and in the thread's CPU seconds so that a rank waiting for a core (more
ranks than cores) does not read as a slow host. Its tensors come from a private
generator, so that the model's random state is untouched; changing the kernel changes KERNEL,
and a profile and a run that timed different kernels are not compared.
"""

import time

import torch
import torch.nn.functional as F

KERNEL = "block w64 t32 fp32 fwd+bwd warm v2"
WIDTH, TOKENS, REPEATS = 64, 32, 3


class ReferenceKernel:
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        w = lambda *shape: (torch.randn(*shape, generator=g) / shape[-1] ** 0.5).requires_grad_()
        self.x = torch.randn(1, TOKENS, WIDTH, generator=g)
        self.weights = [w(3 * WIDTH, WIDTH), w(WIDTH, WIDTH), w(2 * WIDTH, WIDTH), w(WIDTH, 2 * WIDTH)]

    def _block(self):
        qkv, proj, up, down = self.weights
        x = self.x
        q, k, v = F.linear(F.layer_norm(x, (WIDTH,)), qkv).chunk(3, dim=-1)
        x = x + F.linear(F.scaled_dot_product_attention(q, k, v, is_causal=True), proj)
        x = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (WIDTH,)), up)), down)
        torch.autograd.grad(x.sum(), self.weights)

    def __call__(self):
        """CPU seconds of one forward and backward (the mean of a few)."""
        # Untimed: the first pass after a step runs on the caches the step left, so its time
        # reads how much of the plan's work was there, not the host's speed (docs/costs.md).
        self._block()
        started = time.thread_time()
        for _ in range(REPEATS):
            self._block()
        return (time.thread_time() - started) / REPEATS


def for_device(device):
    """A ReferenceKernel where the ranks compute on the host's CPU; None on an accelerator, whose
    kernels the host's load does not slow as it does the CPU's."""
    return ReferenceKernel() if device.type == "cpu" else None
