"""Mixed precision. Autocast is the executor's ``autocast=`` (forwards run under
``torch.autocast`` with that dtype, the modules stay fp32). When the modules themselves are
cast to bf16 or fp16, :class:`MasterWeights` keeps an fp32 copy for the optimizer:

    masters = MasterWeights(ex.parameters())
    opt = torch.optim.AdamW(masters.parameters())
    for batch in data:
        ex.step(batch)
        ex.clip_grad_norm_(1.0)      # on the low-precision gradients, globally
        masters.step(opt)            # gradients up to fp32, optimizer step, weights back down
"""

import torch


class MasterWeights:
    """fp32 copies of (low-precision) trainable parameters, which the optimizer steps."""

    def __init__(self, params):
        self.model = [p for p in params if p.requires_grad]
        self.master = [p.detach().clone().float().requires_grad_(True) for p in self.model]

    def parameters(self):
        return list(self.master)

    def step(self, optimizer):
        """The model's gradients into the masters, `optimizer.step()` on the masters, the
        masters back into the model; clears both sets of gradients."""
        for m, p in zip(self.master, self.model):
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for m, p in zip(self.master, self.model):
                p.copy_(m)

    def state_dict(self):
        return {"master": [m.detach().clone() for m in self.master]}

    def load_state_dict(self, state):
        with torch.no_grad():
            for m, saved in zip(self.master, state["master"]):
                m.copy_(saved)
