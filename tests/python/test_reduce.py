"""The executor's gradient reductions (mpipec.torch.executor): gradients flattened into buckets
of one dtype and at most BUCKET_BYTES, each one all-reduce, the sums copied back and divided
where the plan averages (a one-process gloo group, no other processes).

    python -m unittest discover -s tests/python -p test_reduce.py
"""

import unittest
from unittest import mock

import torch

from mpipec.torch import executor
from solo import OneProcessGroup


def params(*grads):
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros_like(g))
        p.grad = g.clone()
        out.append(p)
    return out


class Buckets(unittest.TestCase):
    def test_one_dtype_each_and_no_more_than_the_size_unless_one_gradient_is(self):
        # 40 + 40 bytes fill a 100-byte bucket; 120 bytes go alone (over the size, one
        # gradient); 20 more start the next; the float64 gradient has a bucket of its own.
        ps = params(torch.ones(10), torch.ones(10), torch.ones(30), torch.ones(5), torch.ones(3, dtype=torch.float64))
        with mock.patch.object(executor, "BUCKET_BYTES", 100):
            sizes = [[g.numel() for g in bucket] for bucket in executor._buckets(ps)]
        self.assertEqual(sizes, [[10, 10], [30], [5], [3]])

    def test_by_default_a_stage_of_small_gradients_is_one_call(self):
        ps = params(*(torch.ones(64) for _ in range(300)))
        self.assertEqual(len(executor._buckets(ps)), 1)


class Reduce(OneProcessGroup):
    def test_the_sums_land_in_each_gradient_divided_where_asked(self):
        grads = [torch.tensor([2.0, 4.0]), torch.tensor([[6.0], [8.0]])]
        executor._Bucket(grads, None, divide=2).wait()
        self.assertEqual(grads[0].tolist(), [1.0, 2.0])
        self.assertEqual(grads[1].tolist(), [[3.0], [4.0]])

    def test_an_asynchronous_bucket_lands_on_wait(self):
        # The bucket reduces a flat copy of its gradients: what they hold in between is
        # overwritten by the sums when the bucket is waited on, not before.
        grads = [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]
        bucket = executor._Bucket(grads, None, async_op=True)
        for g in grads:
            g.zero_()
        self.assertEqual([g.tolist() for g in grads], [[0.0, 0.0], [0.0]])
        bucket.wait()
        self.assertEqual([g.tolist() for g in grads], [[1.0, 2.0], [3.0]])


if __name__ == "__main__":
    unittest.main()
