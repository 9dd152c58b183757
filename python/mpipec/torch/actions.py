"""plan.json decoded into typed actions: what each rank runs, in the order it runs it.

An instruction of plan.json (docs/plan-json.md) becomes an :class:`Action`: its op a member of
:class:`Op` (torch.distributed.pipelining's ``_ComputationType`` is the model), the tensor it
works on named by ``stage``, ``mb`` and ``images``. plan.compact.json (docs/plan-formats.md)
decodes to the same actions. Needs only the standard library.
"""

import enum
import json
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote


class Op(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    BACKWARD_INPUT = "backward_input"
    BACKWARD_WEIGHT = "backward_weight"
    SEND = "send"
    RECV = "recv"
    ALL_REDUCE = "all_reduce"
    OPTIMIZER_STEP = "optimizer_step"

    @property
    def is_backward(self):
        return self in (Op.BACKWARD, Op.BACKWARD_INPUT, Op.BACKWARD_WEIGHT)


class Dir(enum.Enum):
    """What a send or receive carries: activations forward, gradients backward."""

    ACT = "act"
    GRAD = "grad"


class Group(enum.Enum):
    """Whose gradients an all_reduce sums: every pipeline rank's replica of a replicated
    stage (`pp`), or the data-parallel replicas of this rank (`dp`)."""

    PP = "pp"
    DP = "dp"


@dataclass(frozen=True)
class Action:
    op: Op
    stage: int = None
    mb: int = None
    peer: int = None
    dir: Dir = None
    group: Group = None
    region: str = None
    # Images [lo, hi) of each sequence: a part of an encode (empty: every image).
    images: tuple = ()
    # A lookahead encoder's forward of the next step's microbatch.
    ahead: bool = False
    # An all_reduce started and waited for only before the optimizer step.
    asynchronous: bool = False
    overlap: bool = False

    @property
    def key(self):
        """The tensor the action produces or sends: (stage, mb, images...)."""
        return (self.stage, self.mb) + self.images

    @property
    def input_key(self):
        """The tensor a forward of this stage reads: the previous stage's output."""
        return (self.stage - 1, self.mb) + self.images

    def __str__(self):
        parts = [self.op.value]
        parts += [v.value if isinstance(v, enum.Enum) else str(v) for v in (self.dir, self.group, self.region) if v is not None]
        if self.stage is not None:
            parts.append(f"s{self.stage}")
        if self.mb is not None:
            parts.append(f"mb{self.mb}")
        if self.peer is not None:
            parts.append(("-> " if self.op is Op.SEND else "<- ") + str(self.peer))
        return " ".join(parts)

    @staticmethod
    def from_json(i):
        """One instruction as plan.json holds it."""
        return Action(
            op=Op(i["op"]), stage=i.get("stage"), mb=i.get("mb"), peer=i.get("peer"),
            dir=Dir(i["dir"]) if "dir" in i else None, group=Group(i["group"]) if "group" in i else None,
            region=i.get("region"), images=tuple(i.get("images", ())), ahead=i.get("step") == 1,
            asynchronous=bool(i.get("async")), overlap=bool(i.get("overlap")),
        )


# plan.compact.json holds each rank's instructions as one string of tokens: an op letter, then
# the present fields (`s` stage, `m` mb, `p` peer, `a`/`g` dir, `P`/`D` group, `r` region, `*`
# overlap), then extensions `;name:12`, `;name:1-3`, `;name=text`, `;name`.
_OPS = {"F": "forward", "B": "backward", "I": "backward_input", "W": "backward_weight",
        "S": "send", "R": "recv", "A": "all_reduce", "O": "optimizer_step"}
_NUMBERS = {"s": "stage", "m": "mb", "p": "peer"}
_ENUMS = {"a": ("dir", "act"), "g": ("dir", "grad"), "P": ("group", "pp"), "D": ("group", "dp")}
_FIELD = re.compile(r"([smp])(\d+)|([agPD])|r([^*]*)|(\*)")


def _extension(i, e):
    if ":" in e:
        key, value = e.split(":", 1)
        lo, dash, hi = value.partition("-")
        i[key] = [int(lo), int(hi)] if dash and lo else int(value)
    elif "=" in e:
        key, value = e.split("=", 1)
        i[key] = unquote(value)
    else:
        i[e] = True


def instruction(token):
    """One token of plan.compact.json as the plan.json instruction it encodes."""
    body, *extensions = token.split(";")
    if not body or body[0] not in _OPS:
        raise ValueError(f"`{token}` is not an instruction token")
    i = {"op": _OPS[body[0]]}
    at = 1
    while at < len(body):
        m = _FIELD.match(body, at)
        if m is None:
            raise ValueError(f"`{token}` is not an instruction token")
        number, value, letter, region, overlap = m.groups()
        if number:
            i[_NUMBERS[number]] = int(value)
        elif letter:
            key, name = _ENUMS[letter]
            i[key] = name
        elif overlap:
            i["overlap"] = True
        else:
            i["region"] = unquote(region)
        at = m.end()
    for e in extensions:
        _extension(i, e)
    return i


class PlanError(ValueError):
    """A plan this runtime cannot run, or one that does not fit the job or the modules."""


def _expand_compact(plan, path):
    if plan.get("version") != 1:
        raise PlanError(f"{path}: compact plan version {plan.get('version')} is newer than this runtime reads (1)")
    ranks = []
    for r in plan["ranks"]:
        instructions = [instruction(t) for t in r["code"].split(" ") if t]
        if len(instructions) != r["count"]:
            raise PlanError(f"{path}: rank {r['rank']} holds {len(instructions)} instructions, not {r['count']}")
        prologue = [instruction(t) for t in r.get("prologue", "").split(" ") if t]
        ranks.append({"rank": r["rank"], "prologue": prologue, "instructions": instructions})
    return dict(plan, format="mpipe-ir", version=1, ranks=ranks)


def load_plan(plan):
    """plan.json's content from a path to either encoding, a dict of either, or an object with
    an ``ir`` (``mpipec.Plan``)."""
    if hasattr(plan, "ir"):
        plan = plan.ir
    path = "plan"
    if isinstance(plan, (str, os.PathLike)):
        path = os.fspath(plan)
        with open(path) as f:
            plan = json.load(f)
    if plan.get("format") == "mpipe-ir-compact":
        plan = _expand_compact(plan, path)
    if plan.get("format") != "mpipe-ir":
        raise PlanError(f"{path}: not an mpipec plan (format {plan.get('format')!r})")
    return plan


def rank_actions(plan, rank):
    """(prologue, instructions) of pipeline rank `rank`, as actions."""
    r = plan["ranks"][rank]
    return [Action.from_json(i) for i in r.get("prologue", [])], [Action.from_json(i) for i in r["instructions"]]


def stage_ids(plan, rank):
    """The stages pipeline rank `rank` holds: its own and every replicated one, in depth order."""
    return [s["id"] for s in plan["stages"] if s.get("rank") == rank or s.get("ranks") == "all"]


def replicated(plan, stage):
    return plan["stages"][stage].get("ranks") == "all"
