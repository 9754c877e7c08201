"""Values several rooms read the same way: NCCL's integer parsing, structured fact values, FR group ranks,
short display forms of long kernel and op names.

Promise: pure functions and constants with no I/O, imported by collectors (which write these values),
analyzers (which judge them) and reports (which show them) alike, so every side agrees on what a value
means and a long templated kernel name is shortened the same way in a finding's title and in the report.
"""

from __future__ import annotations

import json
from typing import Any

ETHTOOL_COUNTER_PREFIX = "ethtool:"  # `counters` rows named "ethtool:<stat>" came from `ethtool -S`


def strtoll_base0(text: str) -> tuple[int, bool]:
    """C `strtoll(text, NULL, 0)` as NCCL applies it: (value, consumed_everything).

    `0136` is octal 94, `0x88` is hex 136, `136abc` is 136 and `abc` is 0; leading spaces are skipped.
    """
    s = text.lstrip(" \t\n\r\f\v")
    sign = 1
    pos = 0
    if s[:1] in "+-" and s[:1]:
        sign = -1 if s[0] == "-" else 1
        pos = 1
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
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def pg_ranks(config: dict[str, Any], pg: str) -> list[int]:
    """The global ranks of process group `pg` from an FR pg_config entry ('ranks': '[0, 1]' or a list)."""
    raw = (config.get(pg) or {}).get("ranks")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    return [int(r) for r in raw] if isinstance(raw, list) and all(isinstance(r, int) for r in raw) else []


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
            if level == depth:
                out.append("<…")
            elif level < depth:
                out.append(ch)
        elif ch == ">" and level > 0:
            if level == depth:
                out.append(">")
            elif level < depth:
                out.append(ch)
            level -= 1
        elif level < depth:
            out.append(ch)
    return "".join(out)
