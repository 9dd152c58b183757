"""mpipec.data against what the families' own code makes of the same samples, on the tiny
models tiny_vlm.py writes (into a temporary directory, once for the module).

    python -m unittest discover -s tests/python -p test_data.py
"""

import json
import os
import tempfile
import unittest

import torch

import tiny_vlm
from mpipec import data

FIXTURES = tempfile.TemporaryDirectory(prefix="mpipec-test-data-")
QWEN, LLAVA = (os.path.join(FIXTURES.name, f) for f in ("qwen2_5_vl", "llava"))


def setUpModule():
    for family, out in (("qwen2_5_vl", QWEN), ("llava", LLAVA)):
        tiny_vlm.write(out, family, vision_layers=2, text_layers=2)


def tearDownModule():
    FIXTURES.cleanup()


def read(fixture, seq_len=4096):
    tokens = data.Tokens(os.path.join(fixture, "model"))
    return tokens, data.read(os.path.join(fixture, "data.jsonl"), tokens, seq_len)


def records(fixture):
    with open(os.path.join(fixture, "data.jsonl")) as f:
        return [json.loads(line) for line in f]


class Llava(unittest.TestCase):
    def test_token_ids_are_the_llava_processors(self):
        from transformers import LlavaProcessor

        tokens, samples = read(LLAVA)
        processor = LlavaProcessor(
            image_processor=tokens.family.image_processor, tokenizer=tokens.tokenizer, patch_size=2,
            vision_feature_select_strategy="default", num_additional_image_tokens=1, image_token="<image>",
        )
        for s, record in zip(samples, records(LLAVA)):
            text = tokens.render(data.messages_of(record))
            images = [tokens.family.open(p) for p in s.images]
            expected = processor(text=[text], images=images, add_special_tokens=False)["input_ids"][0]
            self.assertEqual(s.input_ids, list(expected), s.where)


class Qwen(unittest.TestCase):
    def test_each_placeholder_run_is_its_images_merged_grid(self):
        tokens, samples = read(QWEN)
        image = tokens.family.image_token_id
        for s in samples:
            grid = tokens.family.pixels(s.images)["image_grid_thw"]
            runs, run = [], 0
            for t in s.input_ids + [None]:
                if t == image:
                    run += 1
                elif run:
                    runs, run = runs + [run], 0
            self.assertEqual(runs, (grid.prod(-1) // 4).tolist(), s.where)

    def test_images_of_different_sizes_give_different_grids(self):
        tokens, samples = read(QWEN)
        grids = {tuple(g) for s in samples for g in tokens.family.pixels(s.images)["image_grid_thw"].tolist()}
        self.assertGreater(len(grids), 2, grids)


class Labels(unittest.TestCase):
    def test_only_the_assistants_words_and_end_of_turn_are_trained(self):
        for fixture, end in ((QWEN, "<|im_end|>"), (LLAVA, "</s>")):
            tokens, samples = read(fixture)
            for s, record in zip(samples, records(fixture)):
                trained = tokens.tokenizer.convert_ids_to_tokens([t for t in s.labels if t != data.IGNORE])
                answers = [w for t in record["conversations"] if t["from"] == "gpt" for w in t["value"].split() + [end]]
                self.assertEqual(trained, answers, s.where)

    def test_a_microbatch_pads_on_the_right_without_training_the_padding(self):
        tokens, samples = read(QWEN)
        batches = data.Batches(samples, tokens, microbatches=2, micro_batch_size=3)
        b = batches(0, 1)
        chosen = batches.chosen(0, 1)
        for row, s in enumerate(chosen):
            n = len(s.input_ids)
            self.assertEqual(b["input_ids"][row, :n].tolist(), s.input_ids)
            self.assertTrue(bool((b["labels"][row, n:] == data.IGNORE).all()))
        self.assertEqual(int(b["image_grid_thw"].shape[0]), sum(len(s.images) for s in chosen))
        self.assertTrue(torch.equal(b["mm_token_type_ids"].bool(), b["input_ids"] == tokens.family.image_token_id))


class Problems(unittest.TestCase):
    def check(self, line, expected):
        tokens = data.Tokens(os.path.join(QWEN, "model"))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", dir=QWEN, delete=False) as f:
            f.write(line + "\n")
        try:
            with self.assertRaises(data.DataError) as caught:
                data.read(f.name, tokens, 4096)
        finally:
            os.remove(f.name)
        self.assertEqual(str(caught.exception), f"{f.name}:1: {expected}")

    def test_no_assistant_turn(self):
        self.check('{"image": "images/0.png", "conversations": [{"from": "human", "value": "<image> what"}]}',
                   'no "gpt" turn: nothing to train on')

    def test_placeholders_and_images_differ(self):
        self.check('{"image": "images/0.png", "conversations": [{"from": "human", "value": "what"}, {"from": "gpt", "value": "red"}]}',
                   "1 image and 0 `<image>` in the text; a sample needs at least one image and one `<image>` for each")

    def test_an_unknown_speaker(self):
        self.check('{"image": "images/0.png", "conversations": [{"from": "robot", "value": "<image>"}]}',
                   'a turn must be {"from": "human" | "gpt" | "system", "value": TEXT}, not {"from": "robot", "value": "<image>"}')


if __name__ == "__main__":
    unittest.main()
