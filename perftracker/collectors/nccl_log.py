"""Read NCCL_DEBUG=INFO/WARN/TRACE output into the Store's `nccl` and `config` tables.

Promise: any text file is accepted (a per-process NCCL_DEBUG_FILE, or a job's mixed output with
launcher prefixes, timestamps and unrelated lines, NCCL 2.3 to 2.30). Lines that are not NCCL lines
are skipped; NCCL lines with an unknown message are counted and a sample is kept as `other` facts;
nothing in a log is fatal. Each fact is stored once per process with the line it was first seen on
and how often it repeated, so a gigabyte of Channel lines becomes a few hundred rows.

`nccl` rows: (rank, host, pid, device, key, value, line, file, count). Keys are listed in
`FACT_KEYS`; structured values are compact JSON. Facts printed outside any process header (the bare
`NCCL version` line of NCCL <= 2.21, PyTorch error text) have pid -1 and host "".
`config` rows: one per environment echo (`NCCL_X set by environment to V`), source `nccl_echo`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from perftracker.collectors import nccl_patterns as P
from perftracker.collectors.nccl_lines import ProcFacts, classify_message
from perftracker.store import LoadNote
from perftracker.store.schema import conform

FACT_KEYS = (
    "version", "rank", "nranks", "nnodes", "local_ranks", "comm", "init_complete", "init_start",
    "init_timings", "bootstrap", "socket_if", "oob", "nic", "ib_ro", "ib_no_device", "ibverbs_missing",
    "ib_open_failed", "network", "net_plugin", "plugin_path", "gdr_disabled", "connected_rings", "via",
    "channels", "ring", "tree", "qp", "env", "warn", "completion_error", "error_chain", "cuda_driver",
    "other", "other_count", "warn_lines", "process", "cqe_error", "ibv_error", "sharp", "socket_ifcount",
    "plugin_note", "channel_count", "bootstrap_timings", "connected",
)
_SNIFF_BYTES = 64 * 1024
_OTHER_SAMPLES = 50
_HEAD_CACHE_MAX = 1 << 18


def looks_like_nccl_log(path: Path) -> bool:
    """True when the first 64 KB of `path` contain NCCL debug lines (`NCCL INFO` / `NCCL WARN`)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return False
    return b" NCCL INFO " in head or b" NCCL WARN " in head or b"NCCL version " in head


_HOST_BAD = frozenset(" :[]<>()")


class _FileParser:
    """State of one file's parse; `feed` takes lines, `rows` gives the table rows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = str(path)
        self.procs: dict[tuple[str, int], ProcFacts] = {}
        self.orphan = ProcFacts("", -1, -1)
        self.head_cache: dict[str, tuple[str, int, int, int, str, int] | None] = {}
        self.config: list[dict[str, object]] = []
        self.warn_lines = 0
        self.other_samples = 0

    def _header(self, head: str) -> tuple[str, int, int, int, str, int] | None:
        # Fast path for the plain `host:pid:tid [dev]` header (no launcher prefix, no source file).
        if head.endswith("]"):
            b = head.rfind(" [")
            if b > 0:
                dev = head[b + 2:-1]
                parts = head[:b].rsplit(":", 2)
                if (len(parts) == 3 and dev.isdigit() and parts[1].isdigit() and parts[2].isdigit()
                        and parts[0] and _HOST_BAD.isdisjoint(parts[0])):
                    return (parts[0], int(parts[1]), int(dev), -1, "", -1)
        cached = self.head_cache.get(head, False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        m = P.HEADER.search(head)
        result: tuple[str, int, int, int, str, int] | None = None
        if m is not None:
            rank = -1
            start = m.start()
            if start:
                rm = P.RANK_PREFIX.match(head[:start])
                if rm is not None:
                    rank = int(rm.group("mpi") or rm.group("rk") or rm.group("num"))
            result = (m.group("host"), int(m.group("pid")), int(m.group("dev")), rank,
                      m.group("src") or "", int(m.group("srcline") or -1))
        if len(self.head_cache) > _HEAD_CACHE_MAX:
            self.head_cache.clear()
        self.head_cache[head] = result
        return result

    def feed(self, lines: Iterable[str], first_line: int = 1) -> None:
        procs = self.procs
        header = self._header
        lineno = first_line - 1
        for raw in lines:
            lineno += 1
            if "NCCL" not in raw:
                continue
            i = raw.find(" NCCL ")
            level = raw[i + 6:i + 10] if i >= 0 else ""
            if level != "INFO" and level != "WARN" and level != "TRAC":
                self._loose(raw, lineno)
                continue
            if level == "WARN":
                self.warn_lines += 1
            hdr = header(raw[:i])
            if hdr is None:
                self._loose(raw, lineno)
                continue
            host, pid, dev, rank, src, srcline = hdr
            proc = procs.get((host, pid))
            if proc is None:
                proc = procs[(host, pid)] = ProcFacts(host, pid, dev, lineno)
            if rank >= 0:
                proc.ranks.add(rank)
            j = i + (12 if level == "TRAC" else 11)
            if level == "INFO" and (raw.startswith("Channel", j) or raw.startswith("Ring", j)):
                v = raw.find(" via ", j)
                if v > 0:  # hot path: the bulk of a large INFO log
                    fkey = ("via", raw[v + 5:].rstrip())
                    slot = proc.facts.get(fkey)
                    if slot is None:
                        proc.facts[fkey] = [lineno, 1]
                    else:
                        slot[1] += 1
                    continue
            msg = raw[j:].rstrip()
            if level == "WARN":
                proc.add("warn", f"{src}:{srcline} {msg}" if src else msg, lineno)
            known = classify_message(msg, proc, lineno)
            if known is None:
                continue
            if known == "":
                proc.others += 1
                if self.other_samples < _OTHER_SAMPLES and level != "WARN":
                    self.other_samples += 1
                    proc.add("other", msg[:300], lineno)
            else:  # an environment echo: also a config row
                var, val = known.split("=", 1)
                self.config.append({"host": host, "pid": pid, "rank": min(proc.ranks) if proc.ranks else -1,
                                    "key": var, "value": val, "source": "nccl_echo",
                                    "evidence": f"{self.file}:{lineno}"})

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


def parse_nccl_file(path: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Parse one file; returns (nccl rows, config rows). Raises OSError when the file cannot be read."""
    parser = _FileParser(path)
    line = 1
    with open(path, encoding="utf-8", errors="replace", newline=None) as handle:
        while True:
            chunk = handle.readlines(1 << 22)
            if not chunk:
                break
            parser.feed(chunk, line)
            line += len(chunk)
    return parser.rows()


def load_nccl_logs(paths: Sequence[Path]) -> tuple[dict[str, pd.DataFrame], list[LoadNote]]:
    """Parse NCCL logs into `{"nccl": frame, "config": frame}` plus notes about unreadable files."""
    nccl_rows: list[dict[str, object]] = []
    config_rows: list[dict[str, object]] = []
    notes: list[LoadNote] = []
    for path in paths:
        try:
            rows, config = parse_nccl_file(Path(path))
        except OSError as exc:
            notes.append(LoadNote("warning", str(path), f"NCCL log could not be read: {exc.strerror or exc}"))
            continue
        nccl_rows.extend(rows)
        config_rows.extend(config)
        procs = {(r["host"], r["pid"]) for r in rows if int(str(r["pid"])) >= 0}
        if not procs:
            notes.append(LoadNote("info", str(path), "no NCCL process lines found in this file"))
    frames = {
        "nccl": conform("nccl", pd.DataFrame(nccl_rows)),
        "config": conform("config", pd.DataFrame(config_rows)),
    }
    return frames, notes


def fact_json(value: str) -> dict[str, object]:
    """Decode a structured fact value (JSON object); {} when it is not one."""
    try:
        data = json.loads(value)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
