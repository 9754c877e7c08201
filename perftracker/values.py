"""Values several rooms read the same way: NCCL's integer parsing, structured fact values, FR group ranks.

Promise: pure functions and constants with no I/O, imported by collectors (which write these values)
and analyzers (which judge them) alike, so both sides agree on what a value means.
"""

from __future__ import annotations

import json
from typing import Any

ETHTOOL_COUNTER_PREFIX = "ethtool:"  # `counters` rows named "ethtool:<stat>" came from `ethtool -S`
NET_STATE_CHANGE = "state_change"  # `netdev` row of a link watcher's record: the state changed within `value` s


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
