"""Read the stack snapshots `attach` writes (py-spy dumps of every rank) and say where each rank is.

Promise: `load_stack_inputs(paths)` keeps the files named `stacks/<snapshot>/rank-<r>.json` (as
written by `perftracker.live.stacks`: {"rank", "pid", "host", "ts_ns", "mode", "threads": py-spy
--json}) and returns the `stacks` table (one row per thread; `frames` is JSON, innermost first, of
[name, short file, line, file]) plus load notes for files it could not read. `rank_state` reduces
one rank's threads to what hang diagnosis compares: its main thread's innermost user frame, whether
it waits inside a collective (torch.distributed collectives, c10d::Work::wait natively, or an idle
DDP backward) and which. Both the live sampler and the `hang` analyzer use it, so they agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perftracker.store import LoadNote
from perftracker.store.schema import conform

STACK_FILE = re.compile(r"rank-(\d+)\.json$")
# Functions of torch/distributed/distributed_c10d.py that block until the other ranks arrive.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "all_gather_coalesced", "all_gather_single", "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_single", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "gather", "scatter",
    "barrier", "monitored_barrier", "send", "recv", "all_gather_object", "gather_object", "broadcast_object_list",
    "scatter_object_list", "send_object_list", "recv_object_list", "batch_isend_irecv", "init_process_group",
    "new_group", "_store_based_barrier", "destroy_process_group",
})
_NATIVE_WAIT = ("c10d::Work::wait", "c10d::ProcessGroup", "ProcessGroupGloo", "ProcessGroupNCCL", "c10d::Reducer")
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d\.\d+/|/lib64/python\d\.\d+/")
DDP_WAIT = "DDP gradient all-reduce (in backward)"


@dataclass(frozen=True)
class Frame:
    name: str
    short: str
    line: int
    file: str

    @property
    def native(self) -> bool:
        return self.line <= 0 or ".so" in self.short

    @property
    def user(self) -> bool:
        return not self.native and not self.file.startswith("<") and not _LIBRARY.search(self.file)

    @property
    def site(self) -> str:
        return f"{self.short}:{self.line}" if not self.native else self.short

    def label(self) -> str:
        name = self.name if len(self.name) <= 120 else self.name[:117] + "..."  # C++ template names
        return f"{name} ({self.site})"


@dataclass(frozen=True)
class RankState:
    """Where one rank's main thread is in one snapshot."""

    rank: int
    host: str
    pid: int
    idle: bool
    where: str  # innermost user frame (else innermost Python frame), as "fn (file:line)"
    site: str  # that frame's "file:line": where a waiting rank called the collective
    innermost: str  # the innermost frame of all, native ones included
    collective: str  # "" when not waiting in a collective
    frames: tuple[str, ...]  # the main thread's frames, innermost first, as labels

    @property
    def waiting(self) -> bool:
        return bool(self.collective)


def frames_of(thread: dict[str, Any]) -> list[Frame]:
    """A py-spy thread's frames, innermost first."""
    out = []
    for raw in thread.get("frames") or []:
        if not isinstance(raw, dict):
            continue
        file = str(raw.get("filename") or "")
        short = str(raw.get("short_filename") or file.rsplit("/", 1)[-1])
        line = raw.get("line")
        out.append(Frame(str(raw.get("name") or "?"), short, int(line) if isinstance(line, int) else 0, file))
    return out


def main_thread(threads: Sequence[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    """The thread running the training loop: the process's first thread (os thread id == pid)."""
    for key in ("os_thread_id", "thread_id"):
        for t in threads:
            if t.get(key) == pid:
                return t
    for t in threads:
        if t.get("thread_name") == "MainThread":
            return t
    return threads[0] if threads else None


def collective_of(frames: Sequence[Frame], idle: bool) -> str:
    """The collective these frames wait in ("" if none)."""
    for f in frames:
        if f.file.endswith("distributed_c10d.py") and f.name in COLLECTIVES:
            return f.name
    for f in frames:
        if f.native and any(marker in f.name for marker in _NATIVE_WAIT):
            return "c10d::Work::wait"
    if idle and any(f.name == "_engine_run_backward" for f in frames):
        return DDP_WAIT
    return ""


def rank_state(rank: int, host: str, pid: int, frames: Sequence[Frame], idle: bool) -> RankState:
    python = [f for f in frames if not f.native]
    user = next((f for f in python if f.user), python[0] if python else None)
    return RankState(rank=rank, host=host, pid=pid, idle=idle, where=user.label() if user else "?",
                     site=user.site if user else "?",
                     innermost=frames[0].label() if frames else "?", collective=collective_of(frames, idle),
                     frames=tuple(f.label() for f in frames))


def state_from_threads(rank: int, host: str, pid: int, threads: Sequence[dict[str, Any]]) -> RankState | None:
    """RankState from a py-spy --json dump (None when it has no thread)."""
    thread = main_thread(threads, pid)
    if thread is None:
        return None
    return rank_state(rank, host, pid, frames_of(thread), not bool(thread.get("active")))


def is_stack_file(path: Path) -> bool:
    return path.parent.parent.name == "stacks" and STACK_FILE.search(path.name) is not None


def _rows(path: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    rank, pid = int(data["rank"]), int(data.get("pid", -1))
    rows = []
    for t in data.get("threads") or []:
        frames = [[f.name, f.short, f.line, f.file] for f in frames_of(t)]
        os_thread = t.get("os_thread_id")
        rows.append({
            "rank": rank, "host": str(data.get("host", "")), "pid": pid, "ts_ns": int(data.get("ts_ns", -1)),
            "thread": str(t.get("thread_name") or ""), "frames": json.dumps(frames),
            "snapshot": path.parent.name, "mode": str(data.get("mode", "")), "active": bool(t.get("active")),
            "os_thread": int(os_thread) if isinstance(os_thread, int) else -1,
            "main": t is main_thread(data.get("threads") or [], pid),
            "world_size": int(data.get("world_size", -1)), "file": str(path),
            "switches": int(data["switches"]) if isinstance(data.get("switches"), int) else -1,
        })
    return rows


def load_stack_inputs(paths: Sequence[Path]) -> tuple[pd.DataFrame, list[LoadNote]]:
    """(stacks table, notes) for the stack snapshot files among `paths` (other paths are ignored)."""
    rows: list[dict[str, Any]] = []
    notes: list[LoadNote] = []
    for path in sorted(p for p in paths if is_stack_file(p)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("threads"), list):
                raise TypeError("not a perftracker stack snapshot (no 'threads' list)")
            rows.extend(_rows(path, data))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(LoadNote("warning", str(path), f"stack snapshot skipped ({type(exc).__name__}: {exc})"))
    return conform("stacks", pd.DataFrame(rows)), notes


def signature(states: dict[int, RankState]) -> tuple[tuple[int, str, str], ...]:
    """What two looks at the ranks must share to be "the same picture": each rank's collective and,
    for a rank that waits or is idle, its innermost frame (native ones included), else its user frame."""
    return tuple(sorted((r, s.collective, s.innermost if s.waiting or s.idle else s.where)
                        for r, s in states.items()))


def still(states: dict[int, RankState], before: dict[int, int | None], after: dict[int, int | None],
          seconds: float) -> bool:
    """False when a rank that should be blocked (every rank, or the ranks waiting in a collective when
    others are elsewhere) woke up repeatedly between two looks `seconds` apart (voluntary context
    switches of its main thread, `before` -> `after`): the same stack seen twice, but the rank is
    looping (a sleep in a data loader, a collective done every step), not stuck. Unknown counts
    (None) do not veto. The live sampler and the hang analyzer both judge with this."""
    waiting = [r for r, s in states.items() if s.waiting]
    check = waiting if waiting and len(waiting) < len(states) else list(states)
    for r in check:
        b, a = before.get(r), after.get(r)
        if b is not None and a is not None and a - b > 2 + 0.5 * max(0.0, seconds):
            return False
    return True


def switches_from_table(stacks: pd.DataFrame) -> dict[str, dict[int, int | None]]:
    """snapshot name -> rank -> its main thread's voluntary context switches when dumped (None unknown)."""
    out: dict[str, dict[int, int | None]] = {}
    main = stacks[stacks["main"]]
    for snap, rank, count in zip(main["snapshot"], main["rank"], main["switches"]):
        out.setdefault(str(snap), {})[int(rank)] = int(count) if int(count) >= 0 else None
    return out


def states_from_table(stacks: pd.DataFrame) -> dict[str, dict[int, RankState]]:
    """snapshot name -> rank -> RankState, from the `stacks` table (main threads only)."""
    out: dict[str, dict[int, RankState]] = {}
    main = stacks[stacks["main"]]
    for snap, rank, host, pid, raw, active in zip(main["snapshot"], main["rank"], main["host"], main["pid"],
                                                  main["frames"], main["active"]):
        frames = [Frame(str(n), str(s), int(ln), str(f)) for n, s, ln, f in json.loads(str(raw))]
        out.setdefault(str(snap), {})[int(rank)] = rank_state(int(rank), str(host), int(pid), frames,
                                                              not bool(active))
    return out
