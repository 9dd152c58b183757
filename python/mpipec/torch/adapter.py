"""The model behind ``mpipec verify`` and ``launch.sh``: an adapter, a module with three (or
four) functions that :class:`Adapter` spells out. ``miniature`` (mpipec.torch.miniature) and
``hf`` (mpipec.torch.hf, transformers' vision-language models) are built in; any importable
module name works.
"""

import importlib
from typing import Protocol

import torch


class Adapter(Protocol):
    def build(self, layers: range, kinds: list, config: dict):
        """The stage module of global layers [layers.start, layers.stop): an nn.Module whose
        forward(x, batch) takes the previous stage's output (None on the first stage) and the
        microbatch's batch. `kinds[l]` says what layer l is (`encoder`, `trainable`,
        `part_first`, `part_last`); every process builds a layer identically (seeded by its
        index), so replicas and the single-process reference agree."""

    def batch(self, mb: int, step: int, config: dict) -> dict:
        """The inputs of microbatch `mb` of `step` (replica d's microbatch j is mb = d * M + j),
        the same in every process."""

    def loss(self, output, batch: dict):
        """The model's loss of one microbatch, from the last stage's output."""

    def images(self, batch: dict, lo: int, hi: int, config: dict) -> dict:
        """Optional: the part of a batch holding images [lo, hi) of each sequence (plans
        whose encodes are split by images)."""

    def layer_shapes(self, layer: int, kinds: list, config: dict) -> dict:
        """Optional: {parameter name: shape} of global layer `layer` as the whole model names
        them, what the executor checks each stage module against. Without it, the layer is
        built alone (on the CPU) and its parameters read."""


BUILT_IN = {"miniature": "mpipec.torch.miniature", "hf": "mpipec.torch.hf"}


def load(name):
    return importlib.import_module(BUILT_IN.get(name, name))


def stage_modules(adapter, plan, stages, config, device):
    """{stage: the adapter's module of its layers} for `stages`, on `device`."""
    return {s: adapter.build(range(*plan["stages"][s]["layers"]), config["kinds"], config).to(device) for s in stages}


def images_of(adapter, config):
    """The executor's `images` callback for the adapter, if it splits batches by images."""
    part = getattr(adapter, "images", None)
    return None if part is None else (lambda batch, lo, hi: part(batch, lo, hi, config))


def layer_shapes(adapter, config):
    """The executor's `layer_shapes` callback for the adapter: layer -> {name: shape}."""
    own = getattr(adapter, "layer_shapes", None)
    if own is not None:
        return lambda layer: own(layer, config["kinds"], config)

    def alone(layer):
        # Building may seed torch's generator: the caller's stream stays as it was. On the CPU,
        # not the meta device: the meta device's first initialiser imports for seconds.
        with torch.random.fork_rng(devices=[]):
            module = adapter.build(range(layer, layer + 1), config["kinds"], config)
        return {n: tuple(p.shape) for n, p in module.named_parameters()}

    return alone
