"""Step records from the text a training framework prints, for jobs without the perftracker hook.

Promise: `StepLineParser.feed(line, seen_ns)` turns one line of a job's log (Megatron-LM, DeepSpeed, Hugging Face
Trainer, PyTorch Lightning, torchtitan) into at most one step record in the run-directory format, or None;
records get `"source": "log"`. The lines and how each is timed: docs/internals/collectors.md.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from perftracker.formats.log_lines import line_rank, line_time_ns, strip_ansi

_MEGATRON = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9.]+)")
_DS_STEP = re.compile(r"(?:\]\s|^|\s)step=(\d+), skipped=\d+")
_DS_TIMER = re.compile(r"global_step=(\d+), RunningAvgSamplesPerSec=")
_TQDM = re.compile(r"(\d+)/(\d+) \[[0-9:]+<[0-9:?]+,\s*([0-9.]+)(it/s|s/it)")
_DICT = re.compile(r"(\{'[a-z_]+': .*\})\s*$")
_LIGHTNING_EPOCH = re.compile(r"(?:^|[\s:\]])Epoch (\d{1,9}):\s")
_NOT_TRAINING_BAR = re.compile(r"(?:Validation|Validating|Sanity Checking|Testing|Predicting)\b[^|%]{0,40}:")
_TITAN = re.compile(r"(?<!validate )(?<![A-Za-z_])step:\s{0,8}(\d{1,18})\s+loss:")


class StepLineParser:
    """Stateful: step-by-difference formats remember the previous (step, time) per rank and kind."""

    def __init__(self, host: str = "", default_rank: int = -1) -> None:
        self.host = host
        self.default_rank = default_rank  # the rank of lines without a rank prefix (a file only one worker writes)
        self.previous: dict[tuple[str, int], tuple[int, int]] = {}
        self.last_tqdm: dict[int, int] = {}

    def feed(self, line: str, seen_ns: int) -> dict[str, Any] | None:
        if len(line) > 4096 or not any(key in line for key in ("iteration", "step", "it/s", "s/it")):
            return None
        line = strip_ansi(line)
        rank = line_rank(line)
        if rank < 0:
            rank = self.default_rank
        stamp = line_time_ns(line)
        end_ns = stamp if stamp is not None else seen_ns
        megatron = _MEGATRON.search(line)
        if megatron:
            dur = int(float(megatron.group(2)) * 1e6)
            return self._record(rank, int(megatron.group(1)), end_ns - dur, end_ns, "megatron")
        tqdm = _TQDM.search(line)
        if tqdm:
            if _NOT_TRAINING_BAR.search(line, 0, tqdm.start()):
                return None
            step, total, rate, unit = int(tqdm.group(1)), int(tqdm.group(2)), float(tqdm.group(3)), tqdm.group(4)
            epoch = _LIGHTNING_EPOCH.search(line, 0, tqdm.start())
            if step == 0:
                return None
            if epoch is not None:
                step += int(epoch.group(1)) * total
            if step <= self.last_tqdm.get(rank, -1) or rate <= 0:
                return None
            self.last_tqdm[rank] = step
            dur = int(1e9 / rate) if unit == "it/s" else int(rate * 1e9)
            return self._record(rank, step, end_ns - dur, end_ns, "lightning" if epoch else "hf-tqdm")
        titan = _TITAN.search(line)
        if titan:
            return self._by_difference("torchtitan", rank, int(titan.group(1)), end_ns, "torchtitan")
        for kind, pattern in (("deepspeed-step", _DS_STEP), ("deepspeed-timer", _DS_TIMER)):
            match = pattern.search(line)
            if match and kind == "deepspeed-timer" and any(k[0] == "deepspeed-step" for k in self.previous):
                return None  # the same steps are already counted from the `step=` lines
            if match:
                return self._by_difference(kind, rank, int(match.group(1)), end_ns, "deepspeed")
        logged = _DICT.search(line)
        if logged and ("'step'" in line or "'global_step'" in line):
            try:
                data = ast.literal_eval(logged.group(1))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
            value = data.get("step", data.get("global_step")) if isinstance(data, dict) else None
            if isinstance(value, int) and not isinstance(value, bool):
                return self._by_difference("hf-dict", rank, value, end_ns, "hf-dict")
        return None

    def _by_difference(self, kind: str, rank: int, step: int, end_ns: int, fmt: str) -> dict[str, Any] | None:
        before = self.previous.get((kind, rank))
        self.previous[(kind, rank)] = (step, end_ns)
        if before is None or step <= before[0] or end_ns <= before[1]:
            return None
        dur = (end_ns - before[1]) // (step - before[0])
        return self._record(rank, step, end_ns - dur, end_ns, fmt)

    def _record(self, rank: int, step: int, start_ns: int, end_ns: int, fmt: str) -> dict[str, Any]:
        return {"rank": rank, "step": step, "start_ns": start_ns, "end_ns": end_ns, "host": self.host,
                "source": "log", "format": fmt}
