"""Values several rooms read the same way: NCCL's integer parsing, structured fact values, FR group ranks,
short display forms of long names, `robust_sigma` (MAD x 1.4826) and the range checks every untrusted number
passes before it enters the Store. Pure functions and constants, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import numpy as np

ETHTOOL_COUNTER_PREFIX = "ethtool:"  # `counters` rows named "ethtool:<stat>" came from `ethtool -S`
NET_STATE_CHANGE = "state_change"  # `netdev` row of a link watcher's record: the state changed within `value` s

# The median absolute deviation times this estimates the standard deviation of normal noise: the one robust
# spread every judge of "beyond noise" uses (`robust_sigma`).
MAD_TO_SIGMA = 1.4826

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
# The largest rank taken from an input (world sizes up to 2**20, far above any job run so far): ranks live
# in int32 columns, and analyzers enumerate a world's ranks, so a rank of 10**12 is a broken input.
MAX_RANK = 2**20 - 1


def int_in(value: object, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int | None:
    """`value` when it is an int (not a bool) in [lo, hi], else None."""
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        return value if lo <= value <= hi else None
    return None


def rank_in_range(value: object) -> int | None:
    """A rank (0 .. MAX_RANK), else None: never a wrap to another rank."""
    return int_in(value, 0, MAX_RANK)


def ascii_int(text: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int | None:
    """An integer written in ASCII digits (optional sign, at most 19 digits) in [lo, hi], else None.

    Unlike `int()`, it refuses other scripts' digits and superscripts (`str.isdigit` accepts '²', `int`
    does not) and never spends time on a thousand-digit number.
    """
    body = text[1:] if text[:1] in "+-" else text
    if not body or len(body) > 19 or not body.isascii() or not body.isdigit():
        return None
    return int_in(int(text), lo, hi)


def loose_int(value: object) -> int | None:
    """An int64 from an int, a finite float or Decimal (truncated) or an ASCII decimal string; None otherwise
    (a bool too): the numbers of inputs whose fields have unusual types."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int_in(value)
    if isinstance(value, (float, Decimal)):
        return int(value) if math.isfinite(value) and -(2**63) < value < 2**63 else None
    return ascii_int(value.strip()) if isinstance(value, str) else None


def finite(value: object) -> float | None:
    """`value` as a finite float when it is a real number (not a bool) a float can hold, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float range
        return None
    return number if math.isfinite(number) else None


def strtoll_base0(text: str) -> tuple[int, bool]:
    """C `strtoll(text, NULL, 0)` as NCCL applies it: (value, consumed_everything).

    `0136` is octal 94, `0x88` is hex 136, `136abc` is 136 and `abc` is 0; leading spaces are skipped.
    """
    s = text.lstrip(" \t\n\r\f\v")
    sign, pos = (-1 if s[:1] == "-" else 1), (1 if s[:1] in ("+", "-") else 0)
    base = 10
    if s[pos:pos + 2].lower() == "0x" and len(s) > pos + 2 and s[pos + 2] in "0123456789abcdefABCDEF":
        base, pos = 16, pos + 2
    elif s[pos:pos + 1] == "0":
        base = 8
    digits = "0123456789abcdef"[:base]
    start = pos
    while pos < len(s) and s[pos].lower() in digits:
        pos += 1
    if pos == start:
        return 0, False
    return sign * int(s[start:pos], base), pos == len(s) and s == text


def fact_json(value: str) -> dict[str, object]:
    """Decode a structured fact value (JSON object); {} when it is not one."""
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def pg_ranks(config: dict[str, Any], pg: str) -> list[int]:
    """The global ranks of process group `pg` from an FR pg_config entry ('ranks': '[0, 1]' or a list)."""
    entry = config.get(pg)
    raw = entry.get("ranks") if isinstance(entry, dict) else None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return []
    ranks = [rank_in_range(r) for r in raw] if isinstance(raw, list) else [None]
    return [r for r in ranks if r is not None] if None not in ranks else []


def short_symbol(name: str, limit: int = 80) -> str:
    """A kernel or op name short enough to read: without a leading `void ` and a C++ argument list, then
    with nested template arguments, then all template arguments, as `<…>`, and cut at `limit` with `…`.

    `void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(int, ...)`
    becomes `at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<…>, …>`-like
    text; a name that already fits is returned unchanged (after the first two steps)."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    text = _without_arguments(text)
    for depth in (2, 1):
        if len(text) <= limit:
            break
        text = _collapse_templates(text, depth)
    return text if len(text) <= limit else text[:max(1, limit - 1)].rstrip() + "…"


def _without_arguments(text: str) -> str:
    """`f<T>(int, float)` -> `f<T>`: a trailing, balanced argument list right after a name (no space before it)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            before = text[:i]
            return before if before and (before[-1].isalnum() or before[-1] in "_>") else text
    return text


def _collapse_templates(text: str, depth: int) -> str:
    """Template arguments at `depth` and deeper replaced by `…` (`a<b<c>>` at depth 2 -> `a<b<…>>`)."""
    out, level = [], 0
    for ch in text:
        if ch == "<":
            level += 1
            if level <= depth:
                out.append("<…" if level == depth else ch)
        elif ch == ">" and level > 0:
            if level <= depth:
                out.append(ch)
            level -= 1
        elif level < depth:
            out.append(ch)
    return "".join(out)


def robust_sigma(values: Iterable[float] | np.ndarray, centre: float | None = None) -> float:
    """The robust spread of `values`: their median absolute deviation from `centre` (their median when None),
    times MAD_TO_SIGMA; 0.0 for no values."""
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    if array.size == 0:
        return 0.0
    middle = float(np.median(array)) if centre is None else centre
    return MAD_TO_SIGMA * float(np.median(np.abs(array - middle)))
