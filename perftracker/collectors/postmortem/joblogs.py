"""The post-mortem inputs of a folder: flight-recorder dumps, job output, launcher logs, error files, kernel logs.

Promise: `load_postmortem_inputs(paths)` recognizes each file by content (`is_postmortem_file`: an FR dump or a
torchelastic error file by its first bytes) and returns ({"collectives_fr", "failures"}, notes, RunInfo): job logs
read line by line (regexes only) into `failures` rows and watchdog progress, error files taking the rank torchrun's
ChildFailedError table gives them; anything unreadable is a note. The lines read: docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.bounded import LineBlocks, iter_lines, load_json_file, open_regular, read_head
from perftracker.collectors.postmortem.flight_recorder import (
    load_fr_dumps,
    looks_like_fr_json,
    looks_like_fr_pickle,
)
from perftracker.collectors.traces.ranks import rank_from_name
from perftracker.errors import InputError
from perftracker.formats.log_lines import launcher_prefix
from perftracker.store import LoadNote, RunInfo
from perftracker.store.schema import conform, empty_table
from perftracker.values import MAX_RANK, ascii_int

MAX_ERROR_FILE_BYTES = 64 * 1024 * 1024

SNIFF_BYTES = 256 * 1024
_BINARY_SUFFIXES = (".gz", ".parquet", ".zip", ".png", ".html", ".pt", ".so", ".npz")
MARKERS = (b"Watchdog caught collective operation timeout", b"Traceback (most recent call last)",
           b"ChildFailedError", b"NVRM: Xid", b"Timed out waiting", b"detected by watchdog at work")

_GLOG = re.compile(r"\[?[EWIF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s+\S+:\d+\]")
_WATCHDOG = re.compile(
    r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
    r"(?:, NumelIn=(\d+))?(?:, NumelOut=(\d+))?(?:, Timeout\(ms\)=(\d+))?\) ran for (\d+) milliseconds")
_PG_LINE = re.compile(
    r"\[PG (?:ID )?(\S+?) (?:PG GUID (\S+?)(?:\(([^)]{0,256})\))? )?Rank (\d+)\] (?:Exception \(either an error or "
    r"timeout\) detected by watchdog at work|Timeout at NCCL work): (-?\d+), last enqueued NCCL work: (-?\d+), "
    r"last completed NCCL work: (-?\d+)")
_GLOO = re.compile(r"Timed out waiting (\d+)ms for (recv|send) operation to complete")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)): ?(.*)$")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_C10D = ("distributed_c10d.py", "c10d_logger.py")
_TABLE_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_TABLE_ENTRY = re.compile(r"^\[(\d+)\]:\s*$")
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),? ?(.*)$")
_SYSLOG_HOST = re.compile(r"^(?:\w{3}\s+\d+\s+[\d:]+|\d{4}-\d\d-\d\dT\S+)\s+(\S+)\s+kernel:")


@dataclass
class LogResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)  # rank -> watchdog progress
    notes: list[str] = field(default_factory=list)  # what reading the file cut (long lines, the cap)


def looks_like_job_log(path: Path) -> bool:
    """True when the head or tail of a text file has a failure marker (a cheap sniff)."""
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(SNIFF_BYTES)
            tail = b""
            if size > 2 * SNIFF_BYTES:
                handle.seek(size - SNIFF_BYTES)
                tail = handle.read(SNIFF_BYTES)
    except (InputError, OSError):
        return False
    if b"\0" in head[:4096]:
        return False
    return any(m in head or m in tail for m in MARKERS)


def _row(kind: str, rank: int, file: str, line: int, message: str, **extra: Any) -> dict[str, Any]:
    row = {"rank": rank, "host": "", "kind": kind, "ts_ns": -1, "pg": "", "seq": -1, "op": "", "numel": -1,
           "message": message[:2000], "file": file, "line": line}
    row.update(extra)
    return row


def _glog_ts(text: str, year: int) -> int:
    m = _GLOG.search(text)
    if not m:
        return -1
    month, day, hh, mm, ss, frac = m.groups()
    try:
        base = datetime(year, int(month), int(day), int(hh), int(mm), int(ss), tzinfo=UTC)
    except ValueError:
        return -1
    nanos = int((frac or "0")[:9].ljust(9, "0"))
    return int(base.timestamp()) * 1_000_000_000 + nanos


def _table_time(text: str) -> int:
    try:
        return int(datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S").replace(tzinfo=UTC).timestamp()
                   * 1e9)
    except ValueError:
        return -1


class _Traceback:
    def __init__(self, rank: int, line: int) -> None:
        self.rank, self.line = rank, line
        self.frames: list[tuple[str, int, str]] = []

    def summary(self) -> tuple[str, str]:
        """(collective the rank was in, innermost user frame 'file:line in fn')."""
        op = ""
        for path, _, fn in self.frames:
            if path.endswith(_C10D[0]):
                op = fn
        user = [f for f in self.frames if "site-packages" not in f[0] and "<frozen" not in f[0]]
        where = f"{Path(user[-1][0]).name}:{user[-1][1]} in {user[-1][2]}" if user else ""
        return op, where


class _Parser:
    def __init__(self, path: Path) -> None:
        self.path, self.file = path, str(path)
        try:
            self.year = datetime.fromtimestamp(path.stat().st_mtime, UTC).year
        except OSError:
            self.year = datetime.now(UTC).year
        self.file_rank = rank_from_name(path)
        self.result = LogResult()
        self.tracebacks: dict[int, _Traceback] = {}
        self.table: dict[str, Any] | None = None
        self.in_table = False
        self.root_cause = False

    def feed(self, lineno: int, raw: str) -> None:
        prefix = launcher_prefix(raw)  # formats/log_lines.py: the one rank-prefix grammar
        rank = prefix[0] if prefix else (self.file_rank if self.file_rank is not None else -1)
        text = raw[prefix[1]:].removeprefix(" ") if prefix else raw
        if self._table_line(lineno, raw):
            return
        if (w := _WATCHDOG.search(text)) is not None:
            r, seq, op, nin, nout, tmo, ran = w.groups()
            self.result.rows.append(_row(
                "timeout", _rank(r), self.file, lineno,
                f"watchdog timeout: {op} SeqNum={seq[:20]} ran {ran[:20]} ms (timeout {(tmo or '?')[:20]} ms, "
                f"NumelOut={(nout or '?')[:20]})", seq=_num(seq), op=op.lower()[:64], numel=_num(nin),
                ts_ns=_glog_ts(text, self.year)))
            return
        if (p := _PG_LINE.search(text)) is not None:
            pg, _guid, desc, r, work, enq, comp = p.groups()
            if _rank(r) < 0:
                return
            self.result.progress[str(_rank(r))] = {"pg": pg, "pg_desc": desc or "", "seq": _num(work),
                                                   "last_enqueued": _num(enq), "last_completed": _num(comp)}
            for row in reversed(self.result.rows):
                if row["kind"] == "timeout" and row["rank"] == _rank(r) and row["seq"] == _num(work) and not row["pg"]:
                    row["pg"] = pg
                    row["message"] += f"; pg {pg}{f' ({desc})' if desc else ''}, last enqueued {enq}, last completed {comp}"
                    break
            return
        if (x := _XID.search(text)) is not None:
            h = _SYSLOG_HOST.match(raw)
            self.result.rows.append(_row("xid", -1, self.file, lineno, f"Xid {x.group(2)[:20]} on PCI {x.group(1)[:64]}: "
                                         f"{x.group(3).strip()}", op=f"xid{x.group(2)[:20]}", numel=_num(x.group(2)),
                                         host=h.group(1) if h else ""))
            return
        self._traceback_line(rank, lineno, text)

    def _traceback_line(self, rank: int, lineno: int, text: str) -> None:
        if text.startswith("Traceback (most recent call last)"):
            self.tracebacks[rank] = _Traceback(rank, lineno)
            return
        tb = self.tracebacks.get(rank)
        if tb is None:
            if _GLOO.search(text) is not None and rank >= 0:
                self.result.rows.append(_row("gloo_timeout", rank, self.file, lineno, text.strip(), op=""))
            return
        if (f := _FRAME.match(text)) is not None:
            tb.frames.append((f.group(1), _num(f.group(2)), f.group(3)))
            return
        e = _EXC_LINE.match(text)
        if e is None:
            return
        del self.tracebacks[rank]
        name, msg = e.group(1), e.group(2).strip()
        if name.endswith("ChildFailedError"):
            return  # the launcher's own traceback; its table follows
        op, where = tb.summary()
        kind = "gloo_timeout" if _GLOO.search(msg) else "exception"
        message = f"{name}: {msg}" + (f" (at {where})" if where else "")
        self.result.rows.append(_row(kind, rank, self.file, tb.line, message, op=op))

    def _table_line(self, lineno: int, raw: str) -> bool:
        stripped = raw.strip()
        if stripped.startswith(("Failures:", "Root Cause (first observed failure):")):
            self._flush_table()
            self.in_table = True
            self.root_cause = stripped.startswith("Root Cause")
            return True
        if not self.in_table:
            return False
        if stripped.startswith(("===", "---")) or stripped == "<NO_OTHER_FAILURES>":
            self._flush_table()
            if stripped.startswith("==="):
                self.in_table = False
            return True
        if _TABLE_ENTRY.match(stripped):
            self._flush_table()
            self.table = {"line": lineno, "root": self.root_cause}
            return True
        f = _TABLE_FIELD.match(raw)
        if f is not None and self.table is not None:
            self.table[f.group(1)] = f.group(2).strip()
            return True
        if self.table is not None and "traceback" in self.table and raw.startswith("  "):
            self.table["traceback"] += "\n" + raw.strip()
            return True
        return False

    def _flush_table(self) -> None:
        t, self.table = self.table, None
        if not t or "rank" not in t:
            return
        rank_m = re.match(r"(-?\d{1,19})", t.get("rank", ""))
        code_m = re.match(r"(-?\d{1,19})(?: \(pid: (\d{1,19})\))?\s*(?:\((\w{1,64})\))?", t.get("exitcode", ""))
        code = _num(code_m.group(1), 0) if code_m else 0
        signal = code_m.group(3) if code_m and code_m.group(3) else ""
        trace = t.get("traceback", "")
        message = (f"{'root cause (first observed failure): ' if t['root'] else ''}exitcode {code}"
                   f"{f' ({signal})' if signal else ''}; {trace.splitlines()[-1] if trace else ''}")
        self.result.rows.append(_row(
            "exit", _rank(rank_m.group(1)) if rank_m else -1, self.file, int(t["line"]), message,
            host=t.get("host", ""), ts_ns=_table_time(t.get("time", "")), numel=code,
            error_file=t.get("error_file", "") if t.get("error_file", "") not in ("<N/A>", "") else ""))

    def finish(self) -> LogResult:
        self._flush_table()
        for tb in self.tracebacks.values():  # a traceback cut off (killed mid-print): keep what it says
            op, where = tb.summary()
            if op or where:
                self.result.rows.append(_row("exception", tb.rank, self.file, tb.line,
                                             f"incomplete traceback (at {where})", op=op))
        return self.result


def _num(text: str | None, default: int = -1) -> int:
    """A number a log line writes (ASCII digits, int64), else `default`."""
    number = ascii_int(text or "")
    return default if number is None else number


def _rank(text: str) -> int:
    """A rank a log line names (0 .. MAX_RANK), else -1."""
    rank = ascii_int(text, 0, MAX_RANK)
    return -1 if rank is None else rank


def parse_job_log(path: Path) -> LogResult:
    """Failure rows and watchdog progress of one log file (see the module docstring), read within
    `perftracker.bounded`'s limits; what they cut is in `LogResult.notes`. InputError / OSError when the
    file cannot be opened."""
    parser = _Parser(path)
    blocks = LineBlocks(path)
    for lineno, line in iter_lines(blocks):
        parser.feed(lineno, line)
    result = parser.finish()
    result.notes = blocks.stats.notes(blocks.cap)
    return result


def looks_like_error_file(head: bytes) -> bool:
    text = head.lstrip()[:65536]
    return text[:1] == b"{" and b'"message"' in text and any(
        key in text for key in (b'"extraInfo"', b'"py_callstack"', b'"errorTraits"', b'"timestamp"'))


def load_error_file(path: Path) -> dict[str, Any] | None:
    """One `exception` row from a torchelastic error file, or None when it is not one."""
    try:
        data = load_json_file(path, MAX_ERROR_FILE_BYTES)
    except (InputError, OSError, ValueError):
        return None
    if not isinstance(data, dict) or "message" not in data:
        return None
    msg = data["message"]
    ts = -1
    callstack = ""
    if isinstance(msg, dict):
        extra = msg.get("extraInfo") or {}
        callstack = str(extra.get("py_callstack", "")) if isinstance(extra, dict) else ""
        ts_raw = extra.get("timestamp") if isinstance(extra, dict) else None
        text = str(msg.get("message", ""))
    else:
        text = str(msg)
        ts_raw = data.get("timestamp")
    seconds = ts_raw if isinstance(ts_raw, int) and not isinstance(ts_raw, bool) else ascii_int(str(ts_raw)[:20])
    ts = seconds * 1_000_000_000 if seconds is not None and 0 < seconds < 4 * 10**9 else -1
    tb = _Traceback(-1, 1)
    for line in callstack.splitlines():
        if (f := _FRAME.match(line)) is not None:
            tb.frames.append((f.group(1), _num(f.group(2)), f.group(3)))
    op, where = tb.summary()
    rank = rank_from_name(path)
    if rank is None:
        digits = [p for p in path.parent.parts[-2:] if ascii_int(p, 0, MAX_RANK) is not None]
        rank = _rank(digits[-1]) if digits else -1
    kind = "gloo_timeout" if _GLOO.search(text) else "exception"
    return _row(kind, rank, str(path), 1, text + (f" (at {where})" if where else ""), op=op, ts_ns=ts)


def is_postmortem_file(path: Path) -> bool:
    """A flight-recorder dump or a torchelastic error file (never a profiler trace)."""
    if path.name.endswith(_BINARY_SUFFIXES):
        return False
    head = read_head(path, 65536)
    if b'"traceEvents"' in head:
        return False
    return looks_like_fr_json(head) or looks_like_error_file(head) or (
        looks_like_fr_pickle(head) and not path.name.endswith(".json"))


def classify(paths: Sequence[Path]) -> tuple[list[Path], list[Path], list[Path]]:
    """(flight-recorder dumps, error files, job/kernel logs) among `paths`."""
    fr: list[Path] = []
    errors: list[Path] = []
    logs: list[Path] = []
    for path in paths:
        if path.name.endswith(_BINARY_SUFFIXES):
            continue
        head = read_head(path, 65536)
        if not head:
            continue
        if looks_like_fr_json(head) or looks_like_fr_pickle(head):
            fr.append(path)
        elif looks_like_error_file(head):
            errors.append(path)
        elif (head.lstrip()[:1] != b"{" and not path.name.endswith((".json", ".jsonl"))
              and looks_like_job_log(path)):
            logs.append(path)
    return fr, errors, logs


def _match_error_file(path: Path, named: dict[str, int]) -> int | None:
    """The rank the ChildFailedError table gave this error file (matched on the path's tail)."""
    parts = path.parts
    for shown, rank in named.items():
        shown_parts = Path(shown).parts
        k = min(len(parts), len(shown_parts), 4)
        if k and parts[-k:] == shown_parts[-k:]:
            return rank
    return None


def load_postmortem_inputs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]:
    """(tables {"collectives_fr", "failures"}, notes, RunInfo) for a post-mortem."""
    fr_paths, error_paths, log_paths = classify(paths)
    notes: list[LoadNote] = []
    learned = RunInfo()
    tables: dict[str, pd.DataFrame] = {}
    if fr_paths:
        frame, learned, fr_notes = load_fr_dumps(fr_paths)
        tables["collectives_fr"] = frame
        notes.extend(fr_notes)
    rows: list[dict[str, Any]] = []
    progress: dict[str, dict[str, Any]] = {}
    for path in log_paths:
        try:
            result = parse_job_log(path)
        except (InputError, OSError) as exc:
            notes.append(LoadNote("warning", str(path), f"could not read the log ({getattr(exc, 'message', exc)})"))
            continue
        notes.extend(LoadNote("warning", str(path), n) for n in result.notes)
        rows.extend(result.rows)
        progress.update(result.progress)
    named = {str(r["error_file"]): int(r["rank"]) for r in rows if r.get("error_file") and int(r["rank"]) >= 0}
    for path in error_paths:
        row = load_error_file(path)
        if row is None:
            notes.append(LoadNote("warning", str(path), "looked like a torchelastic error file but is not one"))
            continue
        rank = _match_error_file(path, named)
        if rank is not None:
            row["rank"] = rank
        rows.append(row)
    if rows:
        tables["failures"] = conform("failures", pd.DataFrame(rows))
    elif log_paths or error_paths:
        tables["failures"] = empty_table("failures")
    learned.watchdog_progress = progress
    if fr_paths or log_paths or error_paths:
        notes.append(LoadNote("info", "postmortem", f"post-mortem inputs: {len(fr_paths)} flight-recorder dump(s), "
                              f"{len(log_paths)} job log(s), {len(error_paths)} error file(s)",
                              {"fr": [str(p) for p in fr_paths[:32]], "logs": [str(p) for p in log_paths[:32]],
                               "error_files": [str(p) for p in error_paths[:32]]}))
    return tables, notes, learned

