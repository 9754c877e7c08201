"""What each NVTX range is: a PyTorch op (`--pytorch=autograd-nvtx`), a collective, a step, or a user range.

Promise: `classify(names, domain_is_nccl, step_pattern)` gives, per distinct range name, the Store name, the
`kind` the Kineto path would give that event and the step number when the range is a step. Rules:
docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perftracker.collectors.traces.kineto import CPU_COLLECTIVE, collective_of
from perftracker.values import ascii_int

# autograd-nvtx names: "aten::add, op_id = 31", "aten::mm, seq = 12, op_id = 40, sizes = [[2, 3], [3, 4]]"
_OP_TAIL = re.compile(r", (?:seq|op_id|sizes|input_op_ids)\b")
_SIZES = re.compile(r", sizes = (\[[^\]\n]{0,2000}\](?:\])?)")
_STEP_NAMES = (
    re.compile(r"^ProfilerStep#(\d{1,18})$"),
    re.compile(r"^(?:iteration|iter|step|train_step|training_step|train step|global_step)[ _#:=-]{0,3}(\d{1,18})$",
               re.IGNORECASE),
)
NVTX_RANGE_TYPES = (59, 60, 70)  # NvtxPushPopRange, NvtxStartEndRange, NvtxtPushPopRange
NVTX_DOMAIN_CREATE = 75


@dataclass(frozen=True)
class RangeName:
    name: str  # as the events table holds it
    kind: str  # cpu_op | collective_cpu | annotation
    step: int  # step number when this name is a numbered step range, else -1
    user_step: bool  # the user's chosen step range (numbered by order)
    shapes: str  # autograd-shapes-nvtx sizes, "" when absent


def op_name(text: str) -> tuple[str, str]:
    """(op name, shapes text) of an autograd-nvtx range name; (text, "") for any other name."""
    match = _OP_TAIL.search(text)
    if not match:
        return text, ""
    sizes = _SIZES.search(text, match.start())
    return text[:match.start()], sizes.group(1) if sizes else ""


def classify(text: str, nccl_domain: bool, step_name: str = "") -> RangeName:
    """What one NVTX range name is (see the module's promise)."""
    name, shapes = op_name(text)
    is_op = name != text
    if step_name and step_name in (text, name):
        return RangeName(text, "annotation", -1, True, "")
    for pattern in _STEP_NAMES:
        match = pattern.match(text)
        if match:
            number = ascii_int(match.group(1), 0)
            return RangeName(text, "annotation", -1 if number is None else number, False, "")
    if nccl_domain:
        return RangeName(name, "collective_cpu" if collective_of(name) else "annotation", -1, False, "")
    if CPU_COLLECTIVE.search(name):
        return RangeName(name, "collective_cpu", -1, False, shapes)
    return RangeName(name, "cpu_op" if is_op else "annotation", -1, False, shapes)
