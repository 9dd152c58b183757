"""Devices and process groups: CUDA with NCCL, Ascend NPUs with HCCL (torch_npu), the CPU with
gloo, chosen by what is present unless the caller (or ``MPIPEC_BACKEND``) names one.

``init()`` joins the job as torchrun describes it (``env://``: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, LOCAL_RANK), on one node or several; ``groups(plan)`` makes the pipeline and
data-parallel groups the plan's rank map implies.
"""

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .actions import PlanError

# Every collective waits this long at most, so one failing rank ends the others instead of
# hanging them.
TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("MPIPE_TIMEOUT", "60")))
BACKENDS = ("nccl", "hccl", "gloo")


def _npu_present():
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return torch.npu.is_available()


def batch_to(batch, device=None, dtype=None):
    """`batch` with its tensors on `device` and its floating-point ones in `dtype` (None: where
    and as they are); token ids and sizes keep their integer type."""
    return {k: v.to(device=device, dtype=dtype if v.is_floating_point() else None) if torch.is_tensor(v) else v
            for k, v in batch.items()}


def default_backend():
    """``MPIPEC_BACKEND`` if set, else nccl where CUDA is present, hccl where torch_npu finds an
    NPU, gloo otherwise."""
    named = os.environ.get("MPIPEC_BACKEND")
    if named:
        return named
    if torch.cuda.is_available():
        return "nccl"
    return "hccl" if _npu_present() else "gloo"


def device_of(backend, local_rank=None):
    """This process's device under `backend`: its local GPU or NPU, else the CPU."""
    if backend not in BACKENDS:
        raise ValueError(f"backend `{backend}` is not one of {', '.join(BACKENDS)}")
    local = int(os.environ.get("LOCAL_RANK", "0")) if local_rank is None else local_rank
    if backend == "nccl":
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    if backend == "hccl":
        import torch_npu  # noqa: F401

        torch.npu.set_device(local)
        return torch.device("npu", local)
    return torch.device("cpu")


def init(backend=None, init_method=None, rank=-1, world=-1):
    """Joins the process group (as torchrun says unless `init_method` names another
    rendezvous) and returns this process's device."""
    backend = backend or default_backend()
    device = device_of(backend)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=TIMEOUT)
    return device


@dataclass
class Groups:
    """This process's place in the plan's job and the groups it talks in.

    pp_rank, dp_rank: its coordinates; pp: the group of its replica's pipeline ranks (the
    replicated encoder's all-reduce); dp: its pipeline rank's replicas (None without dp);
    globals: pipeline rank -> global rank within its replica (the peers of sends and recvs).
    """

    pp_rank: int
    dp_rank: int
    pp: object
    dp: object
    globals: list
    dp_size: int = 1


def check_job(plan):
    """A clear error unless the job (already initialised) is the one the plan was made for."""
    world = dist.get_world_size()
    if world != len(plan["rank_map"]):
        raise PlanError(
            f"the plan has {len(plan['rank_map'])} ranks (pp {plan['pipeline']['ranks']} x dp {plan['pipeline']['dp']} x tp "
            f"{plan['pipeline']['tp']}); this job has {world} processes: launch it with {len(plan['rank_map'])}"
        )
    if plan["pipeline"]["tp"] != 1:
        raise PlanError(
            f"the plan has tp = {plan['pipeline']['tp']}; mpipec.torch runs tp = 1 plans: tensor parallelism runs "
            "through the stack's own launcher (`mpipec build --target megatron` or `--target mindformers`)"
        )


def groups(plan):
    """The plan's pipeline and data-parallel groups; every process of the job calls it, in the
    same order (dist.new_group is collective)."""
    check_job(plan)
    pp, dp = plan["pipeline"]["ranks"], plan["pipeline"]["dp"]
    at = {(c["pp"], c["dp"]): c["global"] for c in plan["rank_map"] if c["tp"] == 0}
    me = next(c for c in plan["rank_map"] if c["global"] == dist.get_rank())
    pp_groups = [dist.new_group([at[p, d] for p in range(pp)], timeout=TIMEOUT) for d in range(dp)]
    dp_groups = [dist.new_group([at[p, d] for d in range(dp)], timeout=TIMEOUT) for p in range(pp)] if dp > 1 else None
    return Groups(
        pp_rank=me["pp"], dp_rank=me["dp"], pp=pp_groups[me["dp"]], dp=dp_groups[me["pp"]] if dp_groups else None,
        globals=[at[p, me["dp"]] for p in range(pp)], dp_size=dp,
    )
