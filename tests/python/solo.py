"""A test case run inside a gloo process group of this one process: collectives over one rank,
for the executor's parts that call torch.distributed, with no other processes."""

import tempfile
import unittest

import torch.distributed as dist


class OneProcessGroup(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory()
        dist.init_process_group("gloo", init_method=f"file://{self.scratch.name}/rendezvous", rank=0, world_size=1)

    def tearDown(self):
        dist.destroy_process_group()
        self.scratch.cleanup()
