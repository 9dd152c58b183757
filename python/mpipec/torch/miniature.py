"""The built-in miniature (an adapter, see mpipec.torch.adapter): a ViT-like encoder over random
patches whose features are placed before the text tokens of a small decoder LM, with the
plan's parts, layer counts and trainability, tiny and in fp32. Config keys (what `mpipec`
writes): seed, width, enc_width, patch_dim, vocab, image_tokens, images, text_tokens,
micro_batch_size, kinds.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm attention + MLP, causal for the decoder, bidirectional for the encoder."""

    def __init__(self, width, causal, span=None):
        super().__init__()
        self.causal = causal
        # An encoder attends within one image of `span` tokens (images are independent).
        self.span = span
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        if self.span:
            q, k, v = (t.reshape(-1, self.span, t.shape[-1]) for t in (q, k, v))
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
        span = c["image_tokens"] // c.get("images", 1) if encoder else None
        self.blocks[str(l)] = Block(width, causal=not encoder, span=span)
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
            x = self.blocks[str(l)](x)
            if kind["part_last"] and kind["encoder"]:
                x = self.extra[f"merge{l}"](x)
            if kind["part_last"] and not kind["encoder"]:
                x = self.extra[f"head{l}"](x)
        return x


def build(layers, kinds, config):
    return Stage(layers, kinds, config)


def batch(mb, step, config):
    g = torch.Generator().manual_seed(config["seed"] * 7919 + step * 104729 + mb)
    b = config["micro_batch_size"]
    return {
        "patches": torch.randn(b, config["image_tokens"], config["patch_dim"], generator=g),
        "tokens": torch.randint(0, config["vocab"], (b, config["text_tokens"]), generator=g),
        "labels": torch.randint(0, config["vocab"], (b, config["text_tokens"]), generator=g),
    }


def images(batch, lo, hi, config):
    """The part of a microbatch an encoder part encodes: images [lo, hi) of each sequence."""
    per = config["image_tokens"] // config.get("images", 1)
    return dict(batch, patches=batch["patches"][:, lo * per : hi * per])


def loss(output, batch):
    text = output[:, -batch["labels"].shape[1]:, :]
    return F.cross_entropy(text.reshape(-1, text.shape[-1]), batch["labels"].reshape(-1))
