"""Name the collective a kernel or CPU op performs, and size its message as nccl-tests does.

Promise: `collective_of(name, hint)` gives the canonical collective ('all_reduce', 'all_gather', ...) of a
kernel or CPU op name (or of its "Collective name" arg, the hint), '' for anything else; `message_elems`
gives the element count nccl-tests sizes bus bandwidth by; `DTYPE_BYTES` the bytes of a trace's dtype names.
"""

from __future__ import annotations

import re

# Canonical collective names, matched against lower-cased names with separators removed.
_COLLECTIVES = (
    ("reducescatter", "reduce_scatter"), ("allgather", "all_gather"), ("allreduce", "all_reduce"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"), ("barrier", "barrier"),
    ("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"), ("send", "send"), ("recv", "recv"),
)
DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "long": 8, "int64": 8, "int": 4, "int32": 4, "byte": 1, "char": 1, "bool": 1, "short": 2,
               "float8_e4m3fn": 1, "float8_e5m2": 1}


def message_elems(collective: str, in_elems: int | None, out_elems: int | None, group_size: int) -> int | None:
    """The element count of a collective's message as nccl-tests sizes it for bus bandwidth: the output
    buffer of an all-gather (n x the per-rank input, when the trace gives only the input), the input of
    a reduce-scatter and of everything else (an all-reduce's input and output are the same size)."""
    if collective == "all_gather":
        if out_elems is not None:
            return out_elems
        return None if in_elems is None or group_size <= 0 else in_elems * group_size
    return in_elems if in_elems is not None else out_elems


def collective_of(name: str, hint: str | None = None) -> str:
    """The canonical collective ('all_reduce', ...) a kernel or CPU op performs, or ''."""
    text = (hint or name).lower().replace("_", "").replace(" ", "")
    text = re.sub(r"^(c10d::|gloo:|nccl:|nccldevkernel|ncclkernel|nccl|rccl)", "", text)
    for needle, canonical in _COLLECTIVES:
        if needle in text:
            return canonical
    return ""
