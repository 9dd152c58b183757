"""How a tensor crosses between two ranks: a header naming it, then its bytes.

Point-to-point messages between two ranks match in the order they were sent (NCCL and HCCL
match by order, not by tag), so each tensor comes with a fixed-size int64 header naming it:
direction, producing stage, microbatch, dtype, number of dimensions, then the shape. The
receiver allocates the tensor from the header, on its own device.

On gloo a tensor of at most INLINE_BYTES travels inside its header's message: the receiver
posts a buffer of the header's size and INLINE_BYTES before the message comes (gloo takes a
message shorter than the receive posted for it), and the sender's send writes into that
receive at once. As a second message it would wait for gloo's rendezvous: the sender
announces it, the receiver answers once it has read the header, and only then does the
sender's gloo thread write it, whenever that thread next gets a core; on a host whose cores
the ranks keep busy that was 0.2 to 9 ms a message (about 3 ms on average), 0.2 ms inline.
A larger tensor, and every tensor on NCCL and HCCL (whose receives must match the send's
size), follows its header as a message of its own.
"""

import torch
import torch.distributed as dist

from .actions import Dir

SIZE = 13
MAX_DIMS = SIZE - 5
HEADER_BYTES = SIZE * 8
INLINE_BYTES = 64 * 1024
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


def _fits(nbytes, inline):
    return inline and nbytes <= INLINE_BYTES


def outgoing(direction, stage, mb, t, inline):
    """The messages that carry contiguous tensor `t`, in order: its header with `t` inside
    where `inline` (gloo) and `t` fits, else its header and then `t`."""
    h = header(direction, stage, mb, t)
    nbytes = t.numel() * t.element_size()
    if _fits(nbytes, inline):
        return [torch.cat([h.view(torch.uint8), t.reshape(-1).view(torch.uint8)])]
    return [h, t]


def sends(direction, stage, mb, t, peer, inline):
    """The point-to-point sends of `outgoing`'s messages to `peer`, for one batch."""
    return [dist.P2POp(dist.isend, m, peer) for m in outgoing(direction, stage, mb, t, inline)]


def inline_here():
    """Whether this process group's wire carries small tensors inline (gloo)."""
    return dist.get_backend() == "gloo"


def incoming(device, inline):
    """The buffer a receive posts for the next message from a peer."""
    if inline:
        return torch.empty(HEADER_BYTES + INLINE_BYTES, dtype=torch.uint8, device=device)
    return torch.zeros(SIZE, dtype=torch.int64, device=device)


def decode(buf):
    """((dir, stage, mb), tensor, whether the tensor is still to be received) from a buffer of
    `incoming`, on its device: the tensor itself where it came inside, else an empty one of
    the header's dtype and shape to receive it into."""
    inline = buf.dtype == torch.uint8
    h = buf[:HEADER_BYTES].view(torch.int64) if inline else buf
    values = h.cpu().tolist()
    d, stage, mb, dtype, ndim = values[:5]
    key, shape, dtype = (_DIRS[d], stage, mb), values[5 : 5 + ndim], DTYPES[dtype]
    t = torch.empty(shape, dtype=dtype, device=buf.device)
    nbytes = t.numel() * t.element_size()
    if not _fits(nbytes, inline):
        return key, t, True
    t.view(-1).view(torch.uint8).copy_(buf[HEADER_BYTES : HEADER_BYTES + nbytes])
    return key, t, False


def receive(peer, device, inline):
    """The next tensor from `peer`, waiting for it: ((dir, stage, mb), tensor)."""
    buf = incoming(device, inline)
    dist.recv(buf, peer)
    key, t, rest = decode(buf)
    if rest:
        dist.recv(t, peer)
    return key, t
