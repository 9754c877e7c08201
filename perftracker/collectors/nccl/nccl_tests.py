"""Read nccl-tests output (all_reduce_perf, all_gather_perf, sendrecv_perf, ...) into the Store's `nccl_tests` table.

Promise: any text file is accepted wherever the output sits (launcher prefixes allowed); every test's table
gives one row per message size, with the test's name, devices and average bus bandwidth on each row. Nothing
raises on content; lines are read within `perftracker.bounded`'s limits. Columns: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perftracker.bounded import LineBlocks, read_head
from perftracker.collectors.file_notes import sniffed_table
from perftracker.store import LoadNote

_SNIFF_BYTES = 256 * 1024
# Launcher prefixes before the text nccl-tests printed: mpirun's `[1,0]<stdout>:`, pdsh's `host: `, timestamps.
_PREFIX = re.compile(r"^(?:\[\d{1,6},\d{1,6}\]<std\w{2,3}>:|\[[^\]]{1,64}\]\s?|[\w.-]{1,128}:\s)")
_DEVICE = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+"
                     r"\d+\s+\[[^\]]{0,32}\]\s+(?P<gpu>.{1,80}?)\s*$")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>[\d.]+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<name>\w{1,64})")
_COMMAND = re.compile(r"(?<![\w/])(?:[\w./-]{0,200}/)?(?P<name>\w{1,40}_perf)(?:_mpi)?\b")
_MAX_ROWS = 100_000


def looks_like_nccl_tests(path: Path) -> bool:
    """True when the first 256 KB of `path` hold an nccl-tests table header (`busbw` beside `algbw`)."""
    head = read_head(path, _SNIFF_BYTES)
    return b"busbw" in head and b"algbw" in head


def _strip(line: str) -> str:
    for _ in range(3):
        m = _PREFIX.match(line)
        if m is None or line.lstrip().startswith("#"):
            break
        line = line[m.end():]
    return line.strip()


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _wrong(text: str) -> int | None:
    if text == "N/A":
        return -1
    if text.isdigit():
        return int(text)
    value = _num(text)  # the older `error` column: the largest relative error, a float
    return None if value is None else (0 if value < 1e-3 else 1)


@dataclass
class _Test:
    """One test's table being read."""

    name: str
    rows: list[dict[str, object]] = field(default_factory=list)
    avg: float | None = None


class _Parser:
    def __init__(self, path: Path) -> None:
        self.file = str(path)
        self.tests: list[_Test] = []
        self.current: _Test | None = None
        self.name = ""
        self.devices: dict[int, tuple[str, str]] = {}

    def feed(self, lines: Iterable[str], first: int) -> None:
        lineno = first - 1
        for raw in lines:
            lineno += 1
            if not raw or ("#" not in raw and not any(c.isdigit() for c in raw[:40]) and "_perf" not in raw):
                continue
            self._line(_strip(raw), lineno)

    def _line(self, text: str, lineno: int) -> None:
        if text.startswith("#"):
            self._comment(text, lineno)
            return
        if "_perf" in text and " NCCL " not in text:
            m = _COMMAND.search(text)
            if m is not None:
                self.name = m.group("name")
            return
        if self.current is not None and text[:1].isdigit():
            self._row(text.split(), lineno)

    def _comment(self, text: str, lineno: int) -> None:
        if "busbw" in text and "algbw" in text:
            self.current = _Test(self.name)
            self.tests.append(self.current)
            return
        m = _DEVICE.match(text)
        if m is not None:
            self.devices[int(m.group("rank"))] = (m.group("host"), m.group("gpu"))
            return
        if text.startswith("# nThread"):
            self.devices = {}
            return
        a = _AVG.match(text)
        if a is not None and self.current is not None:
            self.current.avg = float(a.group("bw"))
            return
        c = _CONCLUDED.match(text)
        if c is not None and self.current is not None:
            self.current.name = c.group("name")
            self.current = None

    def _row(self, tokens: list[str], lineno: int) -> None:
        assert self.current is not None
        if len(tokens) < 11 or len(self.current.rows) >= _MAX_ROWS:
            return
        size, count = _num(tokens[0]), _num(tokens[1])
        tail = tokens[-8:]
        middle = tokens[3:-8]
        values = [_num(t) for t in (tail[0], tail[1], tail[2], tail[4], tail[5], tail[6])]
        wrong = (_wrong(tail[3]), _wrong(tail[7]))
        if size is None or count is None or any(v is None for v in values) or None in wrong or len(middle) > 2:
            return
        redop = next((t for t in middle if not t.lstrip("-").isdigit()), "")
        root = next((int(t) for t in middle if t.lstrip("-").isdigit()), -1)
        hosts = sorted({h for h, _ in self.devices.values()})
        gpus = sorted({g for _, g in self.devices.values()})
        self.current.rows.append({
            "file": self.file, "line": lineno, "size_bytes": int(size), "count": int(count), "dtype": tokens[2],
            "redop": redop, "root": root,
            "oop_time_us": values[0], "oop_algbw": values[1], "oop_busbw": values[2], "oop_wrong": wrong[0],
            "ip_time_us": values[3], "ip_algbw": values[4], "ip_busbw": values[5], "ip_wrong": wrong[1],
            "nranks": len(self.devices) or -1, "hosts": ",".join(hosts), "gpus": ",".join(gpus)})

    def rows(self) -> list[dict[str, object]]:
        return [{**row, "test": test.name, "test_index": index, "avg_busbw": float("nan") if test.avg is None else test.avg}
                for index, test in enumerate(self.tests) for row in test.rows]


def parse_nccl_tests_file(path: Path) -> list[dict[str, object]]:
    """The `nccl_tests` rows of one file. Raises InputError / OSError when it cannot be read."""
    parser = _Parser(path)
    for first, lines in LineBlocks(path):
        parser.feed(lines, first)
    return parser.rows()


def load_nccl_tests(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """The `nccl_tests` table of the files that hold nccl-tests output, and notes about unreadable ones."""
    return sniffed_table("nccl_tests", "nccl-tests output", paths, looks_like_nccl_tests, parse_nccl_tests_file)
