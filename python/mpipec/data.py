"""Training data for `mpipec train`: LLaVA conversation JSONL, through the model's own tokenizer,
chat template and image processor.

One sample a line::

    {"id": "0", "image": "cat.png",
     "conversations": [{"from": "human", "value": "<image>\\nWhat is this?"},
                       {"from": "gpt", "value": "A cat."}]}

``image`` (one path) or ``images`` (a list) name files relative to the images folder (by default
the JSONL file's own). Each ``<image>`` in the text is where one image goes, in order; a sample
has as many ``<image>`` as images, and at least one (the plan's encoder has work in every
microbatch). ``from`` is ``human``, ``gpt`` or ``system``.

What a sample becomes:
- the conversation rendered by the tokenizer's chat template, which writes the model's own image
  placeholder (Qwen2.5-VL: ``<|vision_start|><|image_pad|><|vision_end|>``; LLaVA: ``<image>``);
- that placeholder token repeated as many times as the image has features after the vision
  tower (Qwen2.5-VL: its patch grid over the 2 x 2 merge, so it varies with the image's size;
  LLaVA: the vision tower's patches), as the model's processor does;
- labels: the token ids where the assistant speaks (its answer and the template's end of turn),
  -100 everywhere else, so that the loss is only on the assistant's tokens.

Everything that can be wrong with the data is found by `read` before any step runs, each problem
named by file and line: a line that is not JSON or not a conversation, a missing image, a sample
longer than the plan's ``seq_len``. Pixels are read when a microbatch is made (`Batches`).

The tokenizer and the image processor are loaded from the model directory separately rather
than as one transformers processor: Qwen2.5-VL's processor cannot be built without torchvision
(its video processor needs it), and these two are all a training sample needs. The placeholder
expansion is the processor's rule, written out in `Family.image_tokens`.
"""

import json
import os
from dataclasses import dataclass

import torch

IGNORE = -100
ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
# The placeholder LLaVA's data writes for an image.
IMAGE = "<image>"
# How many problems one error lists before it says how many more there are.
SHOWN = 20


def plural(n, noun):
    return f"{n} {noun}" + ("" if n == 1 else "s")


class DataError(ValueError):
    """Problems with the training data, one `FILE:LINE: what` each."""

    def __init__(self, problems):
        self.problems = problems
        more = f"\n... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        super().__init__("\n".join(problems[:SHOWN]) + more)


@dataclass
class Sample:
    where: str
    input_ids: list
    labels: list
    images: list


class Family:
    """What differs between model families in how a sample is made: the image placeholder's
    token, how many features an image becomes, and the pixel tensors the vision tower takes."""

    def __init__(self, config, image_processor):
        self.config = config
        self.image_processor = image_processor

    @staticmethod
    def of(config, image_processor):
        families = {"qwen2_5_vl": Qwen25VL, "llava": Llava}
        if config.model_type not in families:
            raise ValueError(f"`{config.model_type}` models are not ones `mpipec train` knows; it trains {', '.join(families)}")
        return families[config.model_type](config, image_processor)

    def open(self, path):
        from PIL import Image

        with Image.open(path) as image:
            return image.convert("RGB")


class Qwen25VL(Family):
    @property
    def image_token_id(self):
        return self.config.image_token_id

    def image_tokens(self, size):
        """The merged patches of an image of `size` (width, height), after the processor's resize."""
        width, height = size
        patches = self.image_processor.get_number_of_image_patches(height, width, {})
        return patches // self.image_processor.merge_size**2

    def pixels(self, paths):
        out = self.image_processor(images=[self.open(p) for p in paths], return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


class Llava(Family):
    @property
    def image_token_id(self):
        return self.config.image_token_id

    def image_tokens(self, size):
        """Every image is resized to the tower's size; its class token is kept only by the
        "full" feature selection."""
        vision = self.config.vision_config
        return (vision.image_size // vision.patch_size) ** 2 + (self.config.vision_feature_select_strategy == "full")

    def pixels(self, paths):
        out = self.image_processor(images=[self.open(p) for p in paths], return_tensors="pt")
        return {"pixel_values": out["pixel_values"]}


class Tokens:
    """The model directory's tokenizer and image processor, and its family's rules."""

    def __init__(self, model_dir):
        from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

        self.model_dir = model_dir
        config = AutoConfig.from_pretrained(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if not self.tokenizer.chat_template:
            raise ValueError(f"{model_dir}: the tokenizer has no chat template; `mpipec train` renders conversations with it")
        self.family = Family.of(config, AutoImageProcessor.from_pretrained(model_dir))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def render(self, messages, prompt=False):
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)

    def segments(self, messages):
        """The rendered conversation as (text, trained) pieces: each assistant answer is the text
        its turn adds after the generation prompt."""
        pieces, done = [], ""
        for k, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prompt, full = self.render(messages[:k], prompt=True), self.render(messages[: k + 1])
            if not (prompt.startswith(done) and full.startswith(prompt)):
                raise ValueError(f"{self.model_dir}: the chat template does not render a conversation turn by turn")
            pieces += [(prompt[len(done):], False), (full[len(prompt):], True)]
            done = full
        rest = self.render(messages)[len(done):]
        return pieces + [(rest, False)]

    def encode(self, messages, image_tokens):
        """Token ids and labels of a conversation whose images have `image_tokens` features each."""
        ids, labels = [], []
        for text, trained in self.segments(messages):
            piece = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            ids += piece
            labels += piece if trained else [IGNORE] * len(piece)
        placeholder = self.family.image_token_id
        if ids.count(placeholder) != len(image_tokens):
            raise ValueError(f"the chat template wrote {plural(ids.count(placeholder), 'image placeholder')} for {plural(len(image_tokens), 'image')}")
        counts = iter(image_tokens)
        expanded, expanded_labels = [], []
        for token, label in zip(ids, labels):
            n = next(counts) if token == placeholder else 1
            expanded += [token] * n
            expanded_labels += [IGNORE if token == placeholder else label] * n
        return expanded, expanded_labels


def messages_of(record):
    """The conversation as chat-template messages: text split around `<image>` into content items."""
    turns = record.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise ValueError('no "conversations" list')
    messages = []
    for t in turns:
        if not isinstance(t, dict) or t.get("from") not in ROLES or not isinstance(t.get("value"), str):
            raise ValueError(f'a turn must be {{"from": "human" | "gpt" | "system", "value": TEXT}}, not {json.dumps(t)[:80]}')
        content = []
        for k, text in enumerate(t["value"].split(IMAGE)):
            if k:
                content.append({"type": "image"})
            if text:
                content.append({"type": "text", "text": text})
        messages.append({"role": ROLES[t["from"]], "content": content})
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError('no "gpt" turn: nothing to train on')
    return messages


def image_paths(record, folder):
    names = record.get("images", [record["image"]] if "image" in record else [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError('"image" must be a path and "images" a list of paths')
    return [os.path.join(folder, n) for n in names]


def sample(record, folder, tokens, seq_len):
    """One line's sample, or ValueError saying what is wrong with it."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    messages = messages_of(record)
    paths = image_paths(record, folder)
    placeholders = sum(m["content"].count({"type": "image"}) for m in messages)
    if placeholders != len(paths) or not paths:
        raise ValueError(
            f"{plural(len(paths), 'image')} and {placeholders} `<image>` in the text; a sample needs at least one image and one `<image>` for each"
        )
    sizes = []
    for p in paths:
        if not os.path.isfile(p):
            raise ValueError(f"the image `{p}` does not exist")
        try:
            with Image.open(p) as image:
                sizes.append(image.size)
        except (UnidentifiedImageError, OSError) as e:
            raise ValueError(f"the image `{p}` cannot be read: {e}") from None
    counts = [tokens.family.image_tokens(s) for s in sizes]
    ids, labels = tokens.encode(messages, counts)
    if len(ids) > seq_len:
        raise ValueError(f"{len(ids)} tokens ({sum(counts)} of them for its {plural(len(counts), 'image')}), more than the plan's seq_len = {seq_len}")
    return Sample(where="", input_ids=ids, labels=labels, images=paths)


def read(path, tokens, seq_len, images=None):
    """Every sample of the JSONL file at `path`; raises DataError listing each bad line."""
    folder = images if images is not None else os.path.dirname(os.path.abspath(path))
    samples, problems = [], []
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise DataError([f"{path}: cannot read the data: {e.strerror}"]) from None
    with f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line.rstrip())
            except json.JSONDecodeError as e:
                problems.append(f"{where}: not JSON ({e.msg} at column {e.colno})")
                continue
            try:
                s = sample(record, folder, tokens, seq_len)
            except ValueError as e:
                problems.append(f"{where}: {e}")
                continue
            s.where = where
            samples.append(s)
    if problems:
        raise DataError(problems)
    if not samples:
        raise DataError([f"{path}: no samples"])
    return samples


class Batches:
    """The microbatches of every step, the same in every process: step `s`'s microbatch `mb`
    (replica d's j-th is mb = d * M + j) holds `micro_batch_size` samples, taken in an order
    shuffled once an epoch with `seed`. Samples are padded on the right to the longest of the
    microbatch; the decoder is causal, so no real token attends to the padding."""

    def __init__(self, samples, tokens, microbatches, micro_batch_size, seed=0):
        self.samples, self.tokens = samples, tokens
        self.per_step = microbatches * micro_batch_size
        self.micro_batch_size, self.seed = micro_batch_size, seed
        self.orders = {}

    def order(self, epoch):
        if epoch not in self.orders:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self.orders[epoch] = torch.randperm(len(self.samples), generator=g).tolist()
        return self.orders[epoch]

    def chosen(self, step, mb):
        n, first = len(self.samples), (step * self.per_step) + mb * self.micro_batch_size
        return [self.samples[self.order(p // n)[p % n]] for p in range(first, first + self.micro_batch_size)]

    def tokens_in(self, step, microbatches):
        """The tokens (text and image placeholders) of a step's first `microbatches` microbatches."""
        return sum(len(s.input_ids) for mb in range(microbatches) for s in self.chosen(step, mb))

    def image_tokens(self, step, mb):
        """Microbatch `mb`'s image tokens of `step`: its samples' image placeholders, what the
        plan's batch.image_tokens counts (an adaptive plan is derived from them)."""
        image = self.tokens.family.image_token_id
        return sum(s.input_ids.count(image) for s in self.chosen(step, mb))

    def __call__(self, step, mb):
        """Microbatch `mb` of step `step`: input_ids, labels, mm_token_type_ids and the family's
        pixel tensors."""
        chosen = self.chosen(step, mb)
        width = max(len(s.input_ids) for s in chosen)
        pad = lambda values, fill: values + [fill] * (width - len(values))
        input_ids = torch.tensor([pad(s.input_ids, self.tokens.pad_id) for s in chosen])
        labels = torch.tensor([pad(s.labels, IGNORE) for s in chosen])
        family = self.tokens.family
        batch = family.pixels([p for s in chosen for p in s.images])
        batch.update(
            input_ids=input_ids,
            labels=labels,
            mm_token_type_ids=(input_ids == family.image_token_id).int(),
        )
        return batch
