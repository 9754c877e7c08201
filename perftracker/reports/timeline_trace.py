"""The merged timeline as a trace file Perfetto UI and chrome://tracing open (Chrome trace-event JSON, gzip).

`write_trace(path, merged, title)` writes one process per rank (`rank N (host)`), one thread per CPU thread or
GPU stream, markers as instant events, and says in its metadata what it holds and left out.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from perftracker.redaction import safe_frame, safe_text
from perftracker.rundir import atomic_write_bytes


def write_trace(path: Path, merged: Any, title: str) -> int:
    """Write `merged` (`analyzers.traces.merged_timeline.MergedTimeline`); returns the number of trace events
    written. Every name, host, marker and title passes the one redaction (`redaction.safe_frame` / `safe_text`:
    secrets and control characters)."""
    events, markers, ranks, steps = merged.events, merged.markers, merged.ranks, merged.steps
    events = safe_frame(events) if len(events) else events
    title, note = safe_text(title), safe_text(merged.note)
    zero = int(events["start_ns"].min()) if len(events) else 0
    hosts = {int(r): str(h) for r, h in zip(events["rank"], events["host"])} if len(events) else {}
    order = sorted(ranks, key=lambda r: (hosts.get(r, ""), r))
    out: list[dict[str, Any]] = []
    for index, rank in enumerate(order):
        host = hosts.get(rank, "")
        out.append({"ph": "M", "name": "process_name", "pid": rank,
                    "args": {"name": f"rank {rank}" + (f" ({host})" if host else "")}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": index}})
    threads = set()
    for rank, tid, stream, name, kind, start, dur, step in zip(
            events["rank"], events["tid"], events["stream"], events["name"], events["kind"],
            events["start_ns"], events["dur_ns"], events["step"]):
        thread = int(stream) + 1_000_000 if int(stream) >= 0 else int(tid)
        if (int(rank), thread) not in threads:
            threads.add((int(rank), thread))
            label = f"stream {int(stream)}" if int(stream) >= 0 else f"thread {int(tid)}"
            out.append({"ph": "M", "name": "thread_name", "pid": int(rank), "tid": thread, "args": {"name": label}})
        out.append({"ph": "X", "pid": int(rank), "tid": thread, "name": str(name), "cat": str(kind),
                    "ts": (int(start) - zero) / 1e3, "dur": int(dur) / 1e3, "args": {"step": int(step)}})
    for m in markers:
        out.append({"ph": "i", "s": "p", "pid": m.rank, "tid": 0, "name": safe_text(str(m.name)), "cat": "perftracker",
                    "ts": (m.ts_ns - zero) / 1e3, "args": {"detail": safe_text(str(m.detail)), "severity": m.severity}})
    document = {"traceEvents": out, "displayTimeUnit": "ms",
                "metadata": {"tool": "perftracker timeline", "title": title, "ranks": list(ranks),
                             "steps": list(steps), "clock_offsets_ns": {str(k): v for k, v in merged.offsets_ns.items()},
                             "time_zero_ns": zero, "left_out": note}}
    data = json.dumps(document, separators=(",", ":")).encode("utf-8")
    atomic_write_bytes(path, gzip.compress(data, 6) if path.suffix == ".gz" else data)
    return len(out)
