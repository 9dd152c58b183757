"""The built-in miniature (an adapter, see mpipec.torch.adapter): a ViT-like encoder over random
patches whose features are placed before the text tokens of a small decoder LM, with the
plan's parts, layer counts and trainability, tiny and in fp32. Config keys (what `mpipec`
writes): seed, width, enc_width, patch_dim, vocab, image_tokens, images, text_tokens,
micro_batch_size, kinds; for an adaptive plan also plan_image_tokens, and then the image size
changes from microbatch to microbatch and from step to step (`image_tokens` below).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm attention + MLP, causal for the decoder, bidirectional for the encoder."""

    def __init__(self, width, causal):
        super().__init__()
        self.causal = causal
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x, span=None):
        """`span`: an encoder attends within one image of `span` tokens (images are independent)."""
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        if span:
            q, k, v = (t.reshape(-1, span, t.shape[-1]) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(a.reshape(x.shape))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Stage(nn.Module):
    def __init__(self, layers, kinds, config):
        super().__init__()
        self.first, self.last = layers.start, layers.stop
        self.kinds = kinds
        self.blocks = nn.ModuleDict()
        self.extra = nn.ModuleDict()
        for l in layers:
            self._add(l, kinds[l], config)

    def _add(self, l, kind, c):
        torch.manual_seed(c["seed"] * 1000 + l)
        encoder = kind["encoder"]
        width = c["enc_width"] if encoder else c["width"]
        self.blocks[str(l)] = Block(width, causal=not encoder)
        mine = [self.blocks[str(l)]]
        for name, wanted, make in (
            (f"patch{l}", kind["part_first"] and encoder, lambda: nn.Linear(c["patch_dim"], c["enc_width"])),
            (f"merge{l}", kind["part_last"] and encoder, lambda: nn.Linear(c["enc_width"], c["width"])),
            (f"embed{l}", kind["part_first"] and not encoder, lambda: nn.Embedding(c["vocab"], c["width"])),
            (f"head{l}", kind["part_last"] and not encoder, lambda: nn.Linear(c["width"], c["vocab"])),
        ):
            if wanted:
                self.extra[name] = make()
                mine.append(self.extra[name])
        for module in mine:
            module.requires_grad_(kind["trainable"])

    def forward(self, x, batch):
        for l in range(self.first, self.last):
            kind = self.kinds[l]
            if kind["part_first"] and kind["encoder"]:
                x = self.extra[f"patch{l}"](batch["patches"])
            if kind["part_first"] and not kind["encoder"]:
                tokens = self.extra[f"embed{l}"](batch["tokens"])
                x = tokens if x is None else torch.cat([x, tokens], dim=1)
            x = self.blocks[str(l)](x, batch["span"] if kind["encoder"] else None)
            if kind["part_last"] and kind["encoder"]:
                x = self.extra[f"merge{l}"](x)
            if kind["part_last"] and not kind["encoder"]:
                x = self.extra[f"head{l}"](x)
        return x


def build(layers, kinds, config):
    return Stage(layers, kinds, config)


# An adaptive plan's batches: each microbatch's images at one of these sizes, as (a multiple
# of the plan's image_tokens, the miniature's tokens an image): smaller, the plan's own, larger.
SIZES = [(0.25, 1), (1, 2), (4, 3)]


def _size(mb, step, config):
    """The SIZES entry of microbatch `mb` of `step`: the same in every process, changing with
    the step (a multiplicative hash, so neighbouring microbatches differ)."""
    h = ((config["seed"] * 7919 + step * 104729 + mb * 15485863) * 2654435761) % 2**32
    return SIZES[(h >> 16) % len(SIZES)]


def image_tokens(mb, step, config):
    """Microbatch `mb`'s image tokens of `step` as the plan counts them (its batch.image_tokens),
    what an adaptive plan is derived from."""
    if "plan_image_tokens" not in config:
        return None
    return int(_size(mb, step, config)[0] * config["plan_image_tokens"])


def _span(mb, step, config):
    """The miniature's tokens an image."""
    if "plan_image_tokens" in config:
        return _size(mb, step, config)[1]
    return config["image_tokens"] // config.get("images", 1)


def batch(mb, step, config):
    g = torch.Generator().manual_seed(config["seed"] * 7919 + step * 104729 + mb)
    b = config["micro_batch_size"]
    span = _span(mb, step, config)
    return {
        "span": span,
        "patches": torch.randn(b, span * config.get("images", 1), config["patch_dim"], generator=g),
        "tokens": torch.randint(0, config["vocab"], (b, config["text_tokens"]), generator=g),
        "labels": torch.randint(0, config["vocab"], (b, config["text_tokens"]), generator=g),
    }


def images(batch, lo, hi, config):
    """The part of a microbatch an encoder part encodes: images [lo, hi) of each sequence."""
    per = batch["span"]
    return dict(batch, patches=batch["patches"][:, lo * per : hi * per])


def loss(output, batch):
    text = output[:, -batch["labels"].shape[1]:, :]
    return F.cross_entropy(text.reshape(-1, text.shape[-1]), batch["labels"].reshape(-1))
