"""Read NCCL_DEBUG=INFO/WARN/TRACE output into the Store's `nccl` and `config` tables.

Promise: any text file is accepted (NCCL 2.3 to 2.30, mixed with other output); nothing in a log is fatal. Each
fact is stored once per process with the line it was first seen on and how often it repeated. `nccl` rows:
(rank, host, pid, device, key, value, line, file, count); `config` rows: one per environment echo, source
`nccl_echo`. Details: docs/internals/collectors.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd

from perftracker.bounded import LineBlocks, LineStats, read_head
from perftracker.collectors.file_notes import cut_notes, unreadable
from perftracker.collectors.nccl import patterns as P
from perftracker.collectors.nccl.lines import ProcFacts, classify_message
from perftracker.errors import InputError
from perftracker.store import LoadNote
from perftracker.store.schema import conform
from perftracker.values import INT32_MAX, MAX_RANK, ascii_int

_SNIFF_BYTES = 64 * 1024
_OTHER_SAMPLES = 50


def looks_like_nccl_log(path: Path) -> bool:
    """True when the first 64 KB of `path` contain NCCL debug lines (`NCCL INFO` / `NCCL WARN`)."""
    head = read_head(path, _SNIFF_BYTES)
    return b" NCCL INFO " in head or b" NCCL WARN " in head or b"NCCL version " in head


_HOST_BAD = frozenset(" :[]<>()")
MAX_MESSAGE_CHARS = 4096  # NCCL formats each line into a buffer of 1-2 KB: longer is not NCCL's
_LINE_CACHE_MAX = 1 << 17
_V = TypeVar("_V")

# A header: (host, pid, device, rank from a launcher prefix or -1, WARN source file, its line).
_Header = tuple[str, int, int, int, str, int]
# What `classify_message` did with a message: facts added, ranks seen, its return value.
_Effect = tuple[tuple[tuple[tuple[str, str], int], ...], tuple[int, ...], str | None]
# A header line other than `via`: (process, rank, level, WARN fact or None, message, its effect).
_Plan = tuple[ProcFacts, int, str, str | None, str, _Effect]


class _Memo(dict[str, _V]):
    """`memo[text]` is `compute(text)`, computed once per text; emptied when it outgrows `size` (hostile input)."""

    def __init__(self, compute: Callable[[str], _V], size: int) -> None:
        super().__init__()
        self.compute, self.size = compute, size

    def __missing__(self, text: str) -> _V:
        if len(self) > self.size:
            self.clear()
        value = self[text] = self.compute(text)
        return value


def _header(head: str) -> _Header | None:
    """(host, pid, device, rank, WARN source, its line) of a line's header, None when it is not one."""
    # Fast path for the plain `host:pid:tid [dev]` header (no launcher prefix, no source file).
    if head.endswith("]"):
        b = head.rfind(" [")
        if b > 0:
            dev = head[b + 2:-1]
            parts = head[:b].rsplit(":", 2)
            if len(parts) == 3 and parts[0] and _HOST_BAD.isdisjoint(parts[0]):
                pid, tid, device = ascii_int(parts[1], 0), ascii_int(parts[2], 0), ascii_int(dev, 0, INT32_MAX)
                if pid is not None and tid is not None and device is not None:
                    return (parts[0], pid, device, -1, "", -1)
    m = P.HEADER.search(head)
    if m is None:
        return None
    pid, device = ascii_int(m.group("pid"), 0), ascii_int(m.group("dev"), 0, INT32_MAX)
    if pid is None or device is None:
        return None
    rank = -1
    start = m.start()
    if start:
        rm = P.RANK_PREFIX.match(head[:start])
        if rm is not None:
            named = ascii_int(rm.group("mpi") or rm.group("rk") or rm.group("num"), 0, MAX_RANK)
            rank = -1 if named is None else named
    srcline = ascii_int(m.group("srcline") or "", 0)
    return (m.group("host"), pid, device, rank, m.group("src") or "", -1 if srcline is None else srcline)


def _effect(msg: str) -> _Effect:
    """What `classify_message` does with `msg`: the facts it adds, the ranks it sees, its return value."""
    probe = ProcFacts("", -1, -1)
    known = classify_message(msg, probe, -1)
    return tuple((fact, slot[1]) for fact, slot in probe.facts.items()), tuple(probe.ranks), known


@dataclass(slots=True, eq=False)
class _Repeat:
    """A line seen before whose repeat only adds to counts: its facts' slots, WARN and unknown lines."""

    proc: ProcFacts
    warns: int
    others: int
    slots: tuple[tuple[list[int], int], ...]


class _FileParser:
    """State of one file's parse; `feed` takes lines, `rows` gives the table rows."""

    def __init__(self, path: Path) -> None:
        self.file = str(path)
        self.procs: dict[tuple[str, int], ProcFacts] = {}
        self.orphan = ProcFacts("", -1, -1)
        self.headers = _Memo(_header, 1 << 18)
        self.effects = _Memo(_effect, 1 << 16)  # classification reads no state, so it can be replayed
        # a whole line seen before -> its `via` fact's [first line, count], or its plan for `_apply`
        self.seen_lines: dict[str, list[int] | _Plan | _Repeat] = {}
        self.config: list[dict[str, object]] = []
        self.warn_lines = 0
        self.other_samples = 0

    def feed(self, lines: Iterable[str], first_line: int = 1, newline: str = "\n") -> None:
        """Parse `lines` (without their line ends; `newline` is what ended each), numbered from `first_line`.

        A line seen before (logs repeat the same Channel lines by the thousand) is looked up whole:
        a `via` line only bumps its fact's count, any other replays what the first one did.
        """
        seen_lines = self.seen_lines
        lineno = first_line - 1
        for raw in lines:
            lineno += 1
            if "NCCL" not in raw:
                continue
            plan = seen_lines.get(raw)
            if plan is None:
                plan = self._plan(raw, lineno)
                if plan is None:
                    self._loose(raw + newline, lineno)
                    continue
                if len(seen_lines) > _LINE_CACHE_MAX:
                    seen_lines.clear()
                seen_lines[raw] = plan
                if type(plan) is list:  # created the fact: counted already
                    continue
            kind = type(plan)
            if kind is list:
                plan[1] += 1  # type: ignore[index]
            elif kind is _Repeat:
                plan.proc.others += plan.others  # type: ignore[union-attr]
                self.warn_lines += plan.warns  # type: ignore[union-attr]
                for slot, count in plan.slots:  # type: ignore[union-attr]
                    slot[1] += count
            else:
                repeat = self._apply(plan, lineno)  # type: ignore[arg-type]
                if repeat is not None:
                    seen_lines[raw] = repeat

    def _plan(self, raw: str, lineno: int) -> list[int] | _Plan | None:
        """What a header line does: its `via` fact's slot, or a plan for `_apply`; None if not a header."""
        i = raw.find(" NCCL ")
        level = raw[i + 6:i + 10] if i >= 0 else ""
        if level != "INFO" and level != "WARN" and level != "TRAC":
            return None
        header = self.headers[raw[:i]]
        if header is None:
            if level == "WARN":
                self.warn_lines += 1
            return None
        host, pid, device, rank, src, srcline = header
        proc = self.procs.get((host, pid))
        if proc is None:  # a process is created on its first line
            proc = self.procs[(host, pid)] = ProcFacts(host, pid, device, lineno)
        j = i + (12 if level == "TRAC" else 11)
        if level == "INFO" and (raw.startswith("Channel", j) or raw.startswith("Ring", j)):
            v = raw.find(" via ", j)
            if v > 0:  # hot path: the bulk of a large INFO log
                if rank >= 0:
                    proc.ranks.add(rank)
                fkey = ("via", raw[v + 5:].rstrip())
                slot = proc.facts.get(fkey)
                if slot is None:
                    slot = proc.facts[fkey] = [lineno, 0]
                slot[1] += 1
                return slot
        msg = raw[j:j + MAX_MESSAGE_CHARS].rstrip()
        warn = (f"{src}:{srcline} {msg}" if src else msg) if level == "WARN" else None
        return (proc, rank, level, warn, msg, self.effects[msg])

    def _apply(self, plan: _Plan, lineno: int) -> _Repeat | None:
        """Do what the line does; when doing it again can only add to counts, return that as a _Repeat."""
        proc, rank, level, warn, msg, (facts, ranks, known) = plan
        if level == "WARN":
            self.warn_lines += 1
        if rank >= 0:
            proc.ranks.add(rank)
        if warn is not None:
            proc.add("warn", warn, lineno)
        if ranks:
            proc.ranks.update(ranks)
        for fact, count in facts:
            slot = proc.facts.get(fact)
            if slot is None:
                proc.facts[fact] = [lineno, count]
            else:
                slot[1] += count
        others = 0
        if known == "":
            others = 1
            proc.others += 1
            if self.other_samples < _OTHER_SAMPLES and level != "WARN":
                self.other_samples += 1
                proc.add("other", msg[:300], lineno)
                return None  # a sample: the next repeat may be one too
        elif known is not None:  # an environment echo: also a config row (one per line)
            var, val = known.split("=", 1)
            self.config.append({"host": proc.host, "pid": proc.pid, "rank": min(proc.ranks) if proc.ranks else -1,
                                "key": var, "value": val, "source": "nccl_echo",
                                "evidence": f"{self.file}:{lineno}"})
            return None
        # Every fact of this line exists now; a repeat only adds to their counts.
        slots = [(proc.facts[fact], count) for fact, count in facts]
        if warn is not None:
            slots.insert(0, (proc.facts[("warn", warn)], 1))
        return _Repeat(proc, int(level == "WARN"), others, tuple(slots))

    def _loose(self, raw: str, lineno: int) -> None:
        """A line with NCCL in it but no process header: the bare version line, error text, a stray WARN."""
        if "NCCL WARN" in raw and " NCCL WARN " not in raw:
            self.warn_lines += 1
        m = P.VERSION.search(raw)
        if m is not None:
            self.orphan.add("version", m.group("ver"), lineno)
        if "Got completion from peer" in raw or "Got CQE with error" in raw:
            classify_message(raw[raw.find("NET/IB"):] if "NET/IB" in raw else raw, self.orphan, lineno)

    def rows(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        out: list[dict[str, object]] = []
        for proc in [*self.procs.values(), self.orphan]:
            ranks = sorted(proc.ranks)
            rank = ranks[0] if len(ranks) == 1 else -1
            if proc.pid >= 0:
                proc.facts[("process", "")] = [proc.first_line, 1]
                for r in ranks:
                    proc.add("rank", str(r), -1)
                if proc.others:
                    proc.facts[("other_count", str(proc.others))] = [-1, 1]
            for (key, value), (line, count) in proc.facts.items():
                out.append({"rank": rank, "host": proc.host, "pid": proc.pid, "device": proc.device,
                            "key": key, "value": value, "line": line, "file": self.file, "count": count})
        out.append({"rank": -1, "host": "", "pid": -1, "device": -1, "key": "warn_lines",
                    "value": str(self.warn_lines), "line": -1, "file": self.file, "count": 1})
        for row in self.config:
            if row["rank"] == -1:
                owner = self.procs.get((str(row["host"]), int(str(row["pid"]))))
                if owner is not None and len(owner.ranks) == 1:
                    row["rank"] = next(iter(owner.ranks))
        return out, self.config


def parse_nccl_file(path: Path, stats: LineStats | None = None) -> tuple[list[dict[str, object]],
                                                                        list[dict[str, object]]]:
    """Parse one file; returns (nccl rows, config rows). Raises InputError / OSError when it cannot be read.

    Read within `perftracker.bounded`'s limits (regular files only, the per-file cap, lines cut at
    MAX_LINE_CHARS), counted in `stats`."""
    parser = _FileParser(path)
    blocks = LineBlocks(path)
    if stats is not None:
        blocks.stats = stats
    for first, lines in blocks:
        if blocks.ends_open:  # the file's last block: its last line keeps its missing line end (a cut log)
            parser.feed(lines[:-1], first)
            parser.feed(lines[-1:], first + len(lines) - 1, newline="")
        else:
            parser.feed(lines, first)
    return parser.rows()


def load_nccl_logs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """Parse NCCL logs into `{"nccl": frame, "config": frame}` plus notes about unreadable files."""
    nccl_rows: list[dict[str, object]] = []
    config_rows: list[dict[str, object]] = []
    notes: list[LoadNote] = []
    for path in paths:
        stats = LineStats()
        try:
            rows, config = parse_nccl_file(Path(path), stats)
        except (OSError, InputError) as exc:
            notes.append(unreadable(path, "NCCL log", exc))
            continue
        notes.extend(cut_notes(path, stats))
        nccl_rows.extend(rows)
        config_rows.extend(config)
        if not any(int(str(r["pid"])) >= 0 for r in rows):
            notes.append(LoadNote("info", str(path), "no NCCL process lines found in this file"))
    frames = {
        "nccl": conform("nccl", pd.DataFrame(nccl_rows)),
        "config": conform("config", pd.DataFrame(config_rows)),
    }
    return frames, notes


