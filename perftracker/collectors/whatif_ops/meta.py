"""A job's `meta` YAML (the OSDI'25 artifact's `meta-<trial>.yaml`), read without a YAML library.

Promise: `read_meta(path)` returns the declared `JobLayout`, or None with a note naming the file and what is
wrong; only flat `key: value` lines within `MAX_BYTES` and `MAX_KEYS` are accepted, never evaluated.
`looks_like_meta(path)` tells such a file by its first bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from perftracker.bounded import read_head, read_text
from perftracker.errors import InputError
from perftracker.store import LoadNote

MAX_BYTES = 64 * 1024
MAX_KEYS = 64
_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,63})\s*:\s*(.*?)\s*$")
_PLAIN = re.compile(r"^[A-Za-z0-9_.\-]{0,128}$")
SIZES = ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size")


@dataclass(frozen=True)
class JobLayout:
    """The parallel layout a meta file declares (1 where it says nothing)."""

    trial: str
    dp_size: int = 1
    pp_size: int = 1
    tp_size: int = 1
    dsp_size: int = 1
    vpp_size: int = 1
    world_size: int = 1


def looks_like_meta(path: Path) -> bool:
    if path.suffix.lower() not in (".yaml", ".yml"):
        return False
    head = read_head(path, 4096)
    return b"pp_size" in head or b"dp_size" in head


def read_meta(path: Path) -> tuple[JobLayout | None, list[LoadNote]]:
    """The layout of `path`, or None with a note saying why it cannot be used."""
    try:
        text, capped = read_text(path, MAX_BYTES)
    except (InputError, OSError) as exc:
        return None, [_bad(path, f"cannot be read ({exc})")]
    if capped.left_out:
        return None, [_bad(path, f"is over {MAX_BYTES // 1024} KiB: not a job's meta file")]
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line.strip() == "---":
            continue
        found = _LINE.match(line)
        if found is None or not _PLAIN.match(found.group(2).strip("'\"")):
            return None, [_bad(path, f"line {number} is not a plain `key: value` line (only those are read)")]
        values[found.group(1)] = found.group(2).strip("'\"")
        if len(values) > MAX_KEYS:
            return None, [_bad(path, f"has more than {MAX_KEYS} keys: not a job's meta file")]
    sizes: dict[str, int] = {}
    for key in SIZES:
        if key in values:
            if not values[key].isdigit() or not 0 < int(values[key]) < 1 << 24:
                return None, [_bad(path, f"`{key}: {values[key]}` is not a positive integer")]
            sizes[key] = int(values[key])
    if "pp_size" not in sizes and "dp_size" not in sizes:
        return None, [_bad(path, "names neither dp_size nor pp_size")]
    trial = values.get("trial_name") or path.stem.removeprefix("meta-")
    return JobLayout(trial, **sizes), []


def _bad(path: Path, what: str) -> LoadNote:
    return LoadNote("warning", str(path), f"{path.name} {what}; the job's layout is taken from its records instead")
