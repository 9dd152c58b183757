"""The wire between two ranks (mpipec.torch.wire): on gloo a tensor of at most INLINE_BYTES
inside its header's message, a larger one (and every one on NCCL) after its header; decoded
back to the same key, dtype, shape and values, and sent for real between two gloo processes,
through the blocking receive and through the executor's inbox thread.

    python -m unittest discover -s tests/python -p test_wire.py
"""

import unittest

import torch
import torch.distributed as dist

import pair
from mpipec.torch import executor, wire
from mpipec.torch.actions import Dir

SMALL = torch.arange(12, dtype=torch.float32).reshape(3, 4)
# Just over the inline size: it must follow its header.
LARGE = torch.arange(wire.INLINE_BYTES // 2 + 1, dtype=torch.float16)
CASES = [
    (Dir.ACT, 2, 5, SMALL),
    (Dir.GRAD, 0, 1, torch.tensor([1.5, -2.0], dtype=torch.bfloat16)),
    (Dir.ACT, 1, 0, torch.ones(2, 0, 3)),
    (Dir.GRAD, 3, 7, LARGE),
    (Dir.ACT, 0, 2, torch.tensor(3.25, dtype=torch.float64)),
]


def _decoded(messages, inline):
    """What a receiver makes of `messages`: the first into a buffer of `incoming`, the rest
    into the tensor it announces."""
    buf = wire.incoming(torch.device("cpu"), inline)
    first = messages[0].view(torch.uint8) if inline else messages[0]
    buf.view(torch.uint8)[: first.numel() * first.element_size()].copy_(first.view(torch.uint8))
    key, t, rest = wire.decode(buf)
    if rest:
        t.copy_(messages[1])
    return key, t, rest


class Encoding(unittest.TestCase):
    def test_a_tensor_comes_back_as_it_was_sent_inline_or_not(self):
        for inline in (True, False):
            for d, stage, mb, t in CASES:
                messages = wire.outgoing(d, stage, mb, t, inline)
                key, got, _ = _decoded(messages, inline)
                self.assertEqual(key, (d, stage, mb))
                self.assertEqual((got.dtype, got.shape), (t.dtype, t.shape))
                self.assertTrue(torch.equal(got, t), (inline, t))

    def test_only_a_small_tensor_on_gloo_rides_inside_its_header(self):
        self.assertEqual(len(wire.outgoing(Dir.ACT, 0, 0, SMALL, True)), 1)
        self.assertEqual(len(wire.outgoing(Dir.ACT, 0, 0, LARGE, True)), 2)
        self.assertEqual(len(wire.outgoing(Dir.ACT, 0, 0, SMALL, False)), 2)
        _, _, rest = _decoded(wire.outgoing(Dir.ACT, 0, 0, LARGE, True), True)
        self.assertTrue(rest)

    def test_an_inline_message_fits_the_receive_posted_for_it(self):
        biggest = torch.zeros(wire.INLINE_BYTES // 4)
        (message,) = wire.outgoing(Dir.ACT, 0, 0, biggest, True)
        self.assertEqual(message.numel(), wire.incoming(torch.device("cpu"), True).numel())


def _exchange(rank):
    """Rank 1's messages from rank 0, each case sent twice over: once for the blocking receive,
    once for an inbox."""
    if rank == 0:
        for _ in range(2):
            for d, stage, mb, t in CASES:
                for m in wire.outgoing(d, stage, mb, t, True):
                    dist.send(m, 1)
        return None
    got = [wire.receive(0, torch.device("cpu"), True) for _ in CASES]
    inbox = executor.Inbox(0, len(CASES), torch.device("cpu"))
    got += [inbox.next() for _ in CASES]
    inbox.join()
    return got


class BetweenTwoProcesses(unittest.TestCase):
    def test_every_case_arrives_whole_by_either_receive(self):
        _, got = pair.on_two_ranks(_exchange)
        expected = [((d, stage, mb), t) for d, stage, mb, t in CASES] * 2
        self.assertEqual(len(got), len(expected))
        for (key, t), (want_key, want) in zip(got, expected):
            self.assertEqual(key, want_key)
            self.assertTrue(torch.equal(t, want) and t.dtype == want.dtype, (key, t))


if __name__ == "__main__":
    unittest.main()
