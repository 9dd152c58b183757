"""Writes what `mpipec train`'s tests train on, with nothing downloaded: a transformers model
directory (a tiny random config saved with `save_pretrained`, a word-level tokenizer built with
the tokenizers library and given a chat template, the family's real image processor), PNGs of
several sizes and a LLaVA conversation JSONL over them.

    python tiny_vlm.py OUT --family qwen2_5_vl|llava --vision-layers V --text-layers T

writes OUT/model/, OUT/images/*.png and OUT/data.jsonl.
"""

import argparse
import json
import os

import torch
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

WORDS = "what is in the image a red green blue square circle on white black it shows two and small large".split()
# (width, height) of the images: Qwen's processor gives each its own patch grid.
SIZES = [(8, 8), (12, 20), (16, 8), (8, 12), (20, 12)]
SAMPLES = 12

QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} "
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
LLAVA_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | upper }}: "
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }} {% endif %}{% endfor %}"
    "{% if m['role'] == 'assistant' %}</s> {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT: {% endif %}"
)


def tokenizer(special, template):
    words = ["<unk>", "USER:", "ASSISTANT:", "SYSTEM:", "user", "assistant", "system"] + WORDS
    vocab = {w: i for i, w in enumerate(special + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token=special[0], additional_special_tokens=special[1:]
    )
    fast.chat_template = template
    return fast


def qwen(vision_layers, text_layers):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessorPil

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tok = tokenizer(special, QWEN_TEMPLATE)
    ids = tok.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        vision_config=dict(
            depth=vision_layers, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
            patch_size=2, temporal_patch_size=2, spatial_merge_size=2, window_size=8,
            fullatt_block_indexes=[vision_layers - 1],
        ),
        text_config=dict(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=text_layers,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
        ),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    # Small images stay small: 4 x 4 to 24 x 24 pixels, in 2-pixel patches merged 2 x 2.
    processor = Qwen2VLImageProcessorPil(patch_size=2, temporal_patch_size=2, merge_size=2, min_pixels=16, max_pixels=576)
    return Qwen2_5_VLForConditionalGeneration(config), tok, processor


def llava(vision_layers, text_layers):
    from transformers import CLIPImageProcessorPil, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    special = ["<pad>", "<s>", "</s>", "<image>"]
    tok = tokenizer(special, LLAVA_TEMPLATE)
    ids = tok.convert_tokens_to_ids
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=vision_layers, num_attention_heads=2,
            image_size=8, patch_size=2, projection_dim=16,
        ),
        text_config=LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=text_layers,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            bos_token_id=ids("<s>"), eos_token_id=ids("</s>"), pad_token_id=ids("<pad>"),
        ),
        image_token_index=ids("<image>"), image_seq_length=16,
        # The last vision block's output, so that every vision block takes part in the loss.
        vision_feature_layer=-1, vision_feature_select_strategy="default", tie_word_embeddings=False,
    )
    processor = CLIPImageProcessorPil(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8})
    return LlavaForConditionalGeneration(config), tok, processor


def images(folder, g):
    os.makedirs(folder, exist_ok=True)
    names = []
    for k, (w, h) in enumerate(SIZES):
        pixels = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy()
        name = f"{k}.png"
        Image.fromarray(pixels).save(os.path.join(folder, name))
        names.append(f"images/{name}")
    return names


def conversations(names, g):
    pick = lambda seq, n: [seq[int(i)] for i in torch.randint(0, len(seq), (n,), generator=g)]
    for k in range(SAMPLES):
        shown = pick(names, 1 + k % 2)
        question = " ".join("<image>" for _ in shown) + " " + " ".join(pick(WORDS, 3))
        turns = [{"from": "human", "value": question}, {"from": "gpt", "value": " ".join(pick(WORDS, 2 + k % 3))}]
        if k % 3 == 0:
            turns += [{"from": "human", "value": " ".join(pick(WORDS, 2))}, {"from": "gpt", "value": " ".join(pick(WORDS, 2))}]
        record = {"id": str(k), "conversations": turns}
        record.update({"image": shown[0]} if len(shown) == 1 else {"images": shown})
        yield record


def write(out, family, vision_layers, text_layers):
    """OUT/model/, OUT/images/*.png and OUT/data.jsonl of a family's tiny model."""
    torch.manual_seed(1)
    model, tok, processor = (qwen if family == "qwen2_5_vl" else llava)(vision_layers, text_layers)
    model_dir = os.path.join(out, "model")
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    g = torch.Generator().manual_seed(2)
    names = images(os.path.join(out, "images"), g)
    with open(os.path.join(out, "data.jsonl"), "w") as f:
        for record in conversations(names, g):
            f.write(json.dumps(record) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--family", choices=["qwen2_5_vl", "llava"], required=True)
    ap.add_argument("--vision-layers", type=int, required=True)
    ap.add_argument("--text-layers", type=int, required=True)
    a = ap.parse_args()
    write(a.out, a.family, a.vision_layers, a.text_layers)


if __name__ == "__main__":
    main()
