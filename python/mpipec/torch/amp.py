"""Mixed precision. Autocast is the executor's ``autocast=`` (forwards run under
``torch.autocast`` with that dtype, the modules stay fp32). fp16 needs loss scaling:
:class:`GradScaler` has torch.amp.GradScaler's methods, with the overflow decided over the
whole job, and the executor scales each microbatch's loss by it (``scaler=``):

    scaler = GradScaler()
    ex = Executor(..., autocast=torch.float16, scaler=scaler)
    for batch in data:
        ex.step(batch)
        scaler.unscale_(opt)         # collective: inf or nan on any process skips every step
        ex.clip_grad_norm_(1.0)      # on the unscaled gradients
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()

When the modules themselves are cast to bf16 or fp16, :class:`MasterWeights` keeps an fp32
copy for the optimizer:

    masters = MasterWeights(ex.parameters())
    opt = torch.optim.AdamW(masters.parameters())
    for batch in data:
        ex.step(batch)
        ex.clip_grad_norm_(1.0)      # on the low-precision gradients, globally
        masters.step(opt)            # gradients up to fp32, optimizer step, weights back down
"""

import torch
import torch.distributed as dist


class MasterWeights:
    """fp32 copies of (low-precision) trainable parameters, which the optimizer steps."""

    def __init__(self, params):
        self.model = [p for p in params if p.requires_grad]
        self.master = [p.detach().clone().float().requires_grad_(True) for p in self.model]

    def parameters(self):
        return list(self.master)

    def step(self, optimizer, scaler=None):
        """The model's gradients into the masters, `optimizer.step()` on the masters (through
        `scaler.step`, which unscales them unless ``scaler.unscale_`` ran and skips the step
        on an overflow), the masters back into the model; clears both sets of gradients."""
        for m, p in zip(self.master, self.model):
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
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


class GradScaler:
    """Dynamic loss scaling for a pipeline job, with torch.amp.GradScaler's methods and
    defaults. torch's decides per process whether the gradients overflowed; in a pipeline each
    process holds other stages' gradients, and an optimizer step taken on some processes and
    skipped on others would leave the stages out of step, so here `unscale_` all-reduces the
    overflow flag over `group` (None: every process of the job) and every process skips the
    step, or none does. The scale is a number every process changes alike.

    device: where the flag is reduced on a process without gradients (None: the device of the
    job's backend, as devices.device_of gives it).
    """

    def __init__(self, device=None, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True, group=None):
        self.device, self.group, self.enabled = device, group, enabled
        self._scale, self.growth_factor, self.backoff_factor = float(init_scale), growth_factor, backoff_factor
        self.growth_interval = growth_interval
        # Steps without an overflow since the scale last changed.
        self.good_steps = 0
        # This step's verdict once `unscale_` has run; None before.
        self.found_inf = None

    def is_enabled(self):
        return self.enabled

    def get_scale(self):
        return self._scale if self.enabled else 1.0

    def scale(self, outputs):
        """`outputs` times the scale (the executor scales each microbatch's loss with it)."""
        return outputs * self._scale if self.enabled else outputs

    def unscale_(self, optimizer):
        """Divides the gradients of `optimizer`'s parameters (or of an iterable of parameters)
        by the scale and finds whether any process's is inf or nan. Collective: every process
        calls it, once a step, before clipping."""
        if not self.enabled:
            return
        if self.found_inf is not None:
            raise RuntimeError("unscale_() has already been called since the last update()")
        params = [p for g in optimizer.param_groups for p in g["params"]] if hasattr(optimizer, "param_groups") else optimizer
        by_kind = {}
        for p in params:
            if p.grad is not None:
                by_kind.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
        device = next(iter(by_kind))[0] if by_kind else self._device()
        found = torch.zeros((), dtype=torch.float32, device=device)
        for (where, _), grads in by_kind.items():
            flag = torch.zeros((), dtype=torch.float32, device=where)
            # torch's own fused kernel: one pass that scales and checks, per device and dtype.
            torch._amp_foreach_non_finite_check_and_unscale_(grads, flag, torch.full((), 1.0 / self._scale, device=where))
            found += flag.to(device)
        dist.all_reduce(found, op=dist.ReduceOp.MAX, group=self.group)
        self.found_inf = bool(found.item())

    def _device(self):
        if self.device is not None:
            return torch.device(self.device)
        from .devices import device_of

        return device_of(dist.get_backend(self.group))

    def step(self, optimizer, *args, **kwargs):
        """`optimizer.step(*args, **kwargs)` unless a gradient of the job overflowed (unscales
        first unless `unscale_` ran this step); returns what it returned, or None if skipped."""
        if not self.enabled:
            return optimizer.step(*args, **kwargs)
        if self.found_inf is None:
            self.unscale_(optimizer)
        return None if self.found_inf else optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        """After the step: the scale times `backoff_factor` if it overflowed, times
        `growth_factor` after `growth_interval` steps in a row that did not, or `new_scale`."""
        if not self.enabled:
            return
        if self.found_inf is None and new_scale is None:
            raise RuntimeError("update() before unscale_() or step() this step: no overflow check was made")
        if new_scale is not None:
            self._scale, self.good_steps = float(new_scale), 0
        elif self.found_inf:
            self._scale, self.good_steps = self._scale * self.backoff_factor, 0
        else:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                self._scale, self.good_steps = self._scale * self.growth_factor, 0
        self.found_inf = None

    def state_dict(self):
        return {"scale": self._scale, "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "good_steps": self.good_steps} if self.enabled else {}

    def load_state_dict(self, state):
        if state:
            self._scale, self.good_steps = float(state["scale"]), state["good_steps"]
            self.growth_factor, self.backoff_factor = state["growth_factor"], state["backoff_factor"]
            self.growth_interval = state["growth_interval"]
