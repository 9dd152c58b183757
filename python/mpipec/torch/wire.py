"""The header that precedes each tensor between two ranks.

Point-to-point messages between two ranks match in the order they were sent (NCCL and HCCL
match by order, not by tag), so each tensor is preceded by a fixed-size int64 header naming it:
direction, producing stage, microbatch, dtype, number of dimensions, then the shape. The
receiver allocates the tensor from the header, on its own device.
"""

import torch

from .actions import Dir

SIZE = 13
MAX_DIMS = SIZE - 5
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
_DIRS = [Dir.ACT, Dir.GRAD]


def header(direction, stage, mb, t):
    """The header of tensor `t`, on `t`'s device (NCCL and HCCL send device tensors only)."""
    if t.dim() > MAX_DIMS:
        raise ValueError(f"a tensor of {t.dim()} dimensions crosses a stage boundary; the wire carries at most {MAX_DIMS}")
    if t.dtype not in DTYPES:
        raise ValueError(f"a {t.dtype} tensor crosses a stage boundary; the wire carries {', '.join(map(str, DTYPES))}")
    h = [_DIRS.index(direction), stage, mb, DTYPES.index(t.dtype), t.dim()] + list(t.shape)
    return torch.tensor(h + [0] * (SIZE - len(h)), dtype=torch.int64).to(t.device)


def empty(device):
    return torch.zeros(SIZE, dtype=torch.int64, device=device)


def decode(h):
    """((dir, stage, mb), an empty tensor of the header's dtype and shape) on `h`'s device."""
    values = [int(v) for v in h.cpu()]
    d, stage, mb, dtype, ndim = values[:5]
    return (_DIRS[d], stage, mb), torch.empty(values[5 : 5 + ndim], dtype=DTYPES[dtype], device=h.device)
