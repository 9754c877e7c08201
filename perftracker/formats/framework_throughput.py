"""The throughput a training job's own log reports: TFLOP/s per GPU and MFU, as Megatron, torchtitan and NeMo print them.

Promise: `parse_line(line)` gives one line's figures (rank, step, tflops, mfu_pct, source), a None value where a
figure is out of range, or None when the line holds none; `MARKERS` are the bytes that tell such a log by its head.
Untrusted text: linear regexes, never eval. The line formats: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from typing import Any

from perftracker.formats.log_lines import line_rank, strip_ansi
from perftracker.values import ascii_int

MAX_TFLOPS = 1e6
MARKERS = (b"TFLOP/s/GPU", b"mfu:", b"TFLOPS_per_GPU", b"tflops_per_sec_per_gpu")
_NUMBER = r"(\d{1,9}(?:\.\d{1,9})?)"
_MEGATRON = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUMBER)
_ITERATION = re.compile(r"\biteration\s{0,40}(\d{1,12})\s{0,40}/")
_TITAN_STEP = re.compile(r"\bstep:\s{0,40}(\d{1,12})\b")
_TITAN_TFLOPS = re.compile(r"\btflops:\s{0,40}(\d{1,9}(?:,\d{3}){0,3}(?:\.\d{1,9})?)")
_TITAN_MFU = re.compile(r"\bmfu:\s{0,40}" + _NUMBER + "%")
_NEMO = re.compile(r"(?i)\b(?:tflops_per_gpu|tflops_per_sec_per_gpu)\s{0,40}[:=]\s{0,40}" + _NUMBER)
_NEMO_STEP = re.compile(r"(?i)\b(?:global_step|step)\s{0,40}[:=]?\s{0,40}(\d{1,12})\b")


def _float(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if 0.0 <= value <= MAX_TFLOPS else None


def _int(match: re.Match[str] | None) -> int:
    text = next((g for g in match.groups() if g is not None), "") if match is not None else ""
    value = ascii_int(text, 0, 10**12)
    return -1 if value is None else value


def parse_line(line: str) -> dict[str, Any] | None:
    """The reported figures of one log line (rank, step, tflops, mfu_pct, source), None when it holds none."""
    text = strip_ansi(line)
    titan_tflops, titan_mfu = _TITAN_TFLOPS.search(text), _TITAN_MFU.search(text)
    tflops: float | None
    mfu: float | None
    if (match := _MEGATRON.search(text)) is not None:
        source, step, tflops, mfu = "megatron", _ITERATION.search(text), _float(match.group(1)), float("nan")
    elif titan_mfu is not None or (titan_tflops is not None and _TITAN_STEP.search(text) is not None):
        source, step = "torchtitan", _TITAN_STEP.search(text)
        tflops = _float(titan_tflops.group(1)) if titan_tflops else float("nan")
        mfu = _float(titan_mfu.group(1)) if titan_mfu else float("nan")
    elif (match := _NEMO.search(text)) is not None:
        source, step, tflops, mfu = "nemo", _NEMO_STEP.search(text), _float(match.group(1)), float("nan")
    else:
        return None
    return {"rank": line_rank(text), "step": _int(step), "tflops": tflops, "mfu_pct": mfu, "source": source}
