"""Hugging Face vision-language models as an adapter (mpipec.torch.adapter; config
``"adapter": "hf"``), for `mpipec verify --model hf:FAMILY`.

The model is transformers' own, built from a tiny random config (no weights, no hub): its
vision blocks are the plan's encoder layers, its decoder layers the plan's LLM layers. A stage
keeps copies of the modules its layers own, under transformers' own parameter names:

    first vision layer   the patch embedding (Qwen) or the embeddings and pre-norm (CLIP)
    last vision layer    the merger (Qwen) or the multi-modal projector (LLaVA)
    first decoder layer  the token embedding, into whose image placeholders the features go
    last decoder layer   the final norm and the LM head

What crosses a stage boundary is one tensor: vision hidden states, then the merged image
features (every image of the microbatch, of ragged lengths, concatenated), then decoder
hidden states. Positions (Qwen's multimodal rope from ``get_rope_index``, the vision windows)
come from the batch, which every rank builds identically. A model family is a class that
:class:`Family` describes; FAMILIES lists them.

Config keys: family (``qwen2_5_vl`` or ``llava``), seed, vision_layers, text_layers, kinds,
micro_batch_size. See docs/verify.md. Importing this module needs transformers.
"""

import copy
import json
import sys
from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from transformers.masking_utils import create_causal_mask
    from transformers.vision_utils import get_vision_attention_seqlens, get_vision_position_ids, get_vision_window_index
except ImportError as e:
    raise ImportError(
        f"`{sys.executable}` cannot import transformers ({e})\n"
        "help: run `scripts/torch-env` from an mpipec checkout (it installs torch and transformers into the\n"
        "      cached environment `mpipec verify` finds by itself), or point --python or MPIPEC_PYTHON at a\n"
        "      Python that has both"
    ) from e

VOCAB = 64
# Special tokens at the top of the tiny vocabulary; text tokens are drawn below them.
IMAGE, VIDEO, VISION_START, VISION_END = 60, 61, 62, 63
TEXT_TOKENS = 56
IGNORE = -100


class Family(Protocol):
    """A model family: how its transformers model is made and cut, and how a stage runs its
    vision side (the decoder side is the same for every family). VISION and TEXT are the
    dotted paths of its vision blocks and decoder layers."""

    VISION: str
    TEXT: str

    def model(config: dict):
        """The family's ForConditionalGeneration from a tiny random config at the config's depths."""

    def parts(first_vision: bool, last_vision: bool, first_text: bool, last_text: bool) -> tuple:
        """(vision modules, text modules) a stage owns besides its blocks, as dotted paths."""

    def images(g, mb: int, config: dict) -> tuple:
        """(processor outputs of a microbatch's images, each image's feature count), drawn from `g`."""

    def positions(full, batch: dict):
        """The decoder's position ids for the batch."""

    def vision_in(stage, batch: dict):
        """The first vision block's input, from the batch's pixels."""

    def vision_blocks(stage, x, layers: range, batch: dict):
        """x through the stage's vision blocks `layers`."""

    def vision_out(stage, x, batch: dict):
        """The image features the decoder's placeholders take, from the last block's output."""


def text_parts(first_text, last_text):
    """The decoder side of a stage, the same in both families (transformers names them alike):
    the rotary table everywhere, the embedding on the first decoder stage, norm and head on the
    last."""
    return (
        ["model.language_model.rotary_emb"]
        + ["model.language_model.embed_tokens"] * first_text
        + ["model.language_model.norm", "lm_head"] * last_text
    )


class Qwen25VL:
    """Qwen2.5-VL: windowed vision blocks with 2D rope, a 2x2 patch merger, a Qwen2 decoder
    with multimodal (temporal, height, width) rope."""

    # (t, h, w) patch grids of the images a microbatch draws from; h and w even for the 2x2 merge.
    GRIDS = [(1, 4, 4), (1, 2, 6), (1, 6, 2), (1, 4, 2), (1, 2, 2)]
    VISION = "model.visual.blocks"
    TEXT = "model.language_model.layers"

    # The tiny model's sizes; a config's "vision" and "text" dicts override them (scripts/gpu-check
    # sets Qwen2.5-VL-7B's).
    TINY_VISION = dict(
        hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
        patch_size=2, temporal_patch_size=2, spatial_merge_size=2,
        # 2x2 merged patches per window, so the larger images span several windows.
        window_size=8,
    )
    TINY_TEXT = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, bos_token_id=None, eos_token_id=None,
        # head_dim 8: a quarter of its rotary frequencies each for height and width.
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
    )

    @staticmethod
    def model(config):
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        depth = config["vision_layers"]
        hf = Qwen2_5_VLConfig(
            vision_config={**Qwen25VL.TINY_VISION, "depth": depth, "fullatt_block_indexes": [depth - 1], **config.get("vision", {})},
            text_config={**Qwen25VL.TINY_TEXT, "num_hidden_layers": config["text_layers"], **config.get("text", {})},
            image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
            vision_end_token_id=VISION_END, tie_word_embeddings=False, attn_implementation=config.get("attention", "eager"),
        )
        return Qwen2_5_VLForConditionalGeneration(hf)

    @staticmethod
    def parts(first_vision, last_vision, first_text, last_text):
        return (
            ["model.visual.rotary_pos_emb"]
            + ["model.visual.patch_embed"] * first_vision
            + ["model.visual.merger"] * last_vision,
            text_parts(first_text, last_text),
        )

    @staticmethod
    def images(g, mb, config):
        """2 or 3 images of the tiny grids, or the config's `grids` (one image each)."""
        if "grids" in config:
            grids = torch.tensor(config["grids"])
        else:
            count = 2 + mb % 2
            grids = torch.tensor([Qwen25VL.GRIDS[int(i)] for i in torch.randint(0, len(Qwen25VL.GRIDS), (count,), generator=g)])
        v = dict(Qwen25VL.TINY_VISION, **config.get("vision", {}))
        width = 3 * v["temporal_patch_size"] * v["patch_size"] ** 2
        patches = int(grids.prod(-1).sum())
        merged = (grids.prod(-1) // v["spatial_merge_size"] ** 2).tolist()
        return {"pixel_values": torch.randn(patches, width, generator=g), "image_grid_thw": grids}, merged

    @staticmethod
    def positions(full, batch):
        position_ids, _ = full.model.get_rope_index(
            batch["input_ids"], mm_token_type_ids=batch["mm_token_type_ids"], image_grid_thw=batch["image_grid_thw"]
        )
        return position_ids

    @staticmethod
    def vision_in(stage, batch):
        x = stage.get_submodule("model.visual.patch_embed")(batch["pixel_values"])
        return stage.vision_order(x, batch)

    @staticmethod
    def vision_blocks(stage, x, layers, batch):
        visual = stage.helper.model.visual
        grid = batch["image_grid_thw"]
        cu_seqlens, max_seqlen = get_vision_attention_seqlens(grid, visual.config)
        window_index, cu_windows = get_vision_window_index(
            grid, spatial_merge_size=visual.spatial_merge_size, window_size=visual.window_size, patch_size=visual.patch_size
        )
        max_window = int((cu_windows[1:] - cu_windows[:-1]).max())
        rotary = stage.get_submodule("model.visual.rotary_pos_emb")
        position_embeddings = rotary(x, get_vision_position_ids(grid, visual.spatial_merge_size))
        position_embeddings = tuple(visual.permute_input_for_window_attn(p, window_index, seq_len=x.shape[0]) for p in position_embeddings)
        for i in layers:
            full = i in visual.fullatt_block_indexes
            x = stage.get_submodule(f"{Qwen25VL.VISION}.{i}")(
                x, cu_seqlens=cu_seqlens if full else cu_windows, max_seqlen=max_seqlen if full else max_window,
                position_embeddings=position_embeddings,
            )
        return x

    @staticmethod
    def vision_out(stage, x, batch):
        merged = stage.get_submodule("model.visual.merger")(x)
        return merged[torch.argsort(stage.window_index(batch))]


class Llava:
    """LLaVA: a CLIP vision tower, a two-layer projector, a Llama decoder."""

    # CLIP sees fixed-size images (8 x 8 pixels in 2 x 2 patches: 16 features each); a
    # microbatch's visual length varies with its number of images.
    IMAGE_SIZE, PATCH = 8, 2
    VISION = "model.vision_tower.encoder.layers"
    TEXT = "model.language_model.layers"

    @staticmethod
    def model(config):
        from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

        hf = LlavaConfig(
            vision_config=CLIPVisionConfig(
                hidden_size=16, intermediate_size=32, num_hidden_layers=config["vision_layers"], num_attention_heads=2,
                image_size=Llava.IMAGE_SIZE, patch_size=Llava.PATCH, projection_dim=16,
            ),
            text_config=LlamaConfig(
                vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=config["text_layers"],
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            ),
            image_token_index=IMAGE, image_seq_length=(Llava.IMAGE_SIZE // Llava.PATCH) ** 2,
            # The last vision block's output, so that every vision block takes part in the loss.
            vision_feature_layer=-1, vision_feature_select_strategy="default", tie_word_embeddings=False,
            attn_implementation="eager",
        )
        return LlavaForConditionalGeneration(hf)

    @staticmethod
    def parts(first_vision, last_vision, first_text, last_text):
        return (
            ["model.vision_tower.embeddings", "model.vision_tower.pre_layrnorm"] * first_vision
            + ["model.multi_modal_projector"] * last_vision,
            text_parts(first_text, last_text),
        )

    @staticmethod
    def images(g, mb, config):
        count = 1 + mb % 3
        pixels = torch.randn(count, 3, Llava.IMAGE_SIZE, Llava.IMAGE_SIZE, generator=g)
        return {"pixel_values": pixels}, [(Llava.IMAGE_SIZE // Llava.PATCH) ** 2] * count

    @staticmethod
    def positions(full, batch):
        return torch.arange(batch["input_ids"].shape[1]).unsqueeze(0).expand(batch["input_ids"].shape[0], -1)

    @staticmethod
    def vision_in(stage, batch):
        x = stage.get_submodule("model.vision_tower.embeddings")(batch["pixel_values"])
        return stage.get_submodule("model.vision_tower.pre_layrnorm")(x)

    @staticmethod
    def vision_blocks(stage, x, layers, batch):
        for i in layers:
            x = stage.get_submodule(f"{Llava.VISION}.{i}")(x, None)
        return x

    @staticmethod
    def vision_out(stage, x, batch):
        # The class token is not an image feature ("default" selection).
        features = stage.get_submodule("model.multi_modal_projector")(x[:, 1:])
        return features.reshape(-1, features.shape[-1])


FAMILIES = {"qwen2_5_vl": Qwen25VL, "llava": Llava}

# One full model per process and config: every stage copies its modules from it, and forked
# ranks inherit the parent's.
_MODELS = {}


def family(config):
    return FAMILIES[config["family"]]


def full_model(config):
    key = json.dumps({k: config[k] for k in ("family", "seed", "vision_layers", "text_layers")}, sort_keys=True)
    if key not in _MODELS:
        torch.manual_seed(config["seed"])
        _MODELS[key] = family(config).model(config).float().eval()
    return _MODELS[key]


def _place(root, dotted, module):
    """Registers `module` at the dotted path under `root`, so that parameter names are transformers' own."""
    *path, leaf = dotted.split(".")
    for name in path:
        if name not in root._modules:
            root.add_module(name, nn.ModuleDict())
        root = root._modules[name]
    root.add_module(leaf, module)


def split(layers, depths):
    """Global layers as (vision blocks, decoder layers), each numbered within its tower."""
    v = depths[0]
    return range(min(layers.start, v), min(layers.stop, v)), range(max(layers.start, v) - v, max(layers.stop, v) - v)


def owned(f, layers, kinds, depths):
    """(dotted path, kind) of each module of the model that global layers `layers` own."""
    v, t = depths
    vision, text = split(layers, depths)
    vision_parts, text_parts = f.parts(vision.start == 0, vision.stop == v, text.start == 0, text.stop == t)
    out = []
    if vision:
        out += [(n, kinds[0]) for n in vision_parts] + [(f"{f.VISION}.{i}", kinds[i]) for i in vision]
    if text:
        out += [(n, kinds[v]) for n in text_parts] + [(f"{f.TEXT}.{j}", kinds[v + j]) for j in text]
    return out


def layer_shapes(layer, kinds, config, model=None):
    """{parameter name: shape} of global layer `layer` of `model` (or the config's tiny one),
    as a stage holding it names them (the adapter protocol's layer_shapes)."""
    full = full_model(config) if model is None else model
    depths = config["vision_layers"], config["text_layers"]
    return {f"{name}.{n}": tuple(p.shape) for name, _ in owned(family(config), range(layer, layer + 1), kinds, depths)
            for n, p in full.get_submodule(name).named_parameters()}


class Stage(nn.Module):
    """Global layers [layers.start, layers.stop) of the model: vision blocks first, then decoder
    layers. The model is `model` (one loaded with from_pretrained, as mpipec.train does) or the
    config's tiny random one."""

    def __init__(self, layers, kinds, config, model=None):
        super().__init__()
        self.family = family(config)
        self.depths = config["vision_layers"], config["text_layers"]
        self.vision, self.text = split(layers, self.depths)
        full = full_model(config) if model is None else model
        # Parameter-free helpers (window and rope arithmetic), shared, not registered.
        self.__dict__["helper"] = full
        for name, kind in owned(self.family, layers, kinds, self.depths):
            module = copy.deepcopy(full.get_submodule(name)).train()
            module.requires_grad_(kind["trainable"])
            _place(self, name, module)

    def window_index(self, batch):
        visual = self.helper.model.visual
        index, _ = get_vision_window_index(
            batch["image_grid_thw"], spatial_merge_size=visual.spatial_merge_size,
            window_size=visual.window_size, patch_size=visual.patch_size,
        )
        return index

    def vision_order(self, x, batch):
        """Qwen's patches in window order, as its vision blocks attend over them."""
        return self.helper.model.visual.permute_input_for_window_attn(x, self.window_index(batch), seq_len=x.shape[0])

    def forward(self, x, batch):
        f = self.family
        if self.vision:
            if self.vision.start == 0:
                x = f.vision_in(self, batch)
            x = f.vision_blocks(self, x, self.vision, batch)
            if self.vision.stop == self.depths[0]:
                x = f.vision_out(self, x, batch)
        if self.text:
            if self.text.start == 0:
                tokens = self.get_submodule("model.language_model.embed_tokens")(batch["input_ids"])
                placeholders = (batch["input_ids"] == self.helper.config.image_token_id).unsqueeze(-1).expand_as(tokens)
                x = tokens.masked_scatter(placeholders, x.to(tokens.dtype))
            rope = self.get_submodule("model.language_model.rotary_emb")(x, batch["position_ids"])
            # No cache, passed by position: transformers renamed that parameter (past_key_values
            # up to 5.17, cache later) and the runtime supports both.
            mask = create_causal_mask(self.helper.config.text_config, x, None, None, position_ids=None)
            for j in self.text:
                x = self.get_submodule(f"{f.TEXT}.{j}")(x, attention_mask=mask, position_embeddings=rope)
            if self.text.stop == self.depths[1]:
                x = self.get_submodule("lm_head")(self.get_submodule("model.language_model.norm")(x))
        return x


def build(layers, kinds, config):
    return Stage(layers, kinds, config)


def batch(mb, step, config):
    """What the family's processor makes of a prompt with 1-3 images: pixel values (and Qwen's
    image grids), the text with each image's placeholder tokens, position ids, and labels that
    ignore the image tokens."""
    f = family(config)
    g = torch.Generator().manual_seed(config["seed"] * 7919 + step * 104729 + mb)
    rows = []
    for _ in range(config["micro_batch_size"]):
        pixels, lengths = f.images(g, mb, config)
        ids = []
        for n in lengths:
            ids += torch.randint(0, TEXT_TOKENS, (2,), generator=g).tolist()
            ids += [VISION_START] + [IMAGE] * n + [VISION_END]
        ids += torch.randint(0, TEXT_TOKENS, (config.get("text_tokens", 4),), generator=g).tolist()
        rows.append((pixels, ids))
    if len(rows) != 1:
        raise ValueError("the Hugging Face adapter runs one sample per microbatch (micro_batch_size = 1)")
    pixels, ids = rows[0]
    input_ids = torch.tensor([ids])
    labels = torch.where(input_ids == IMAGE, IGNORE, torch.randint(0, TEXT_TOKENS, input_ids.shape, generator=g))
    out = dict(pixels, input_ids=input_ids, labels=labels, mm_token_type_ids=(input_ids == IMAGE).int())
    out["position_ids"] = f.positions(full_model(config), out)
    return out


def loss(output, batch):
    """transformers' causal-LM loss: token i predicts label i + 1."""
    logits = output[:, :-1, :]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1), ignore_index=IGNORE)
