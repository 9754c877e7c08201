"""What a rank is doing in one stack snapshot, and whether two snapshots show a stuck job.

`rank_state` reduces one rank's main thread (a `MainStack`) to what hang diagnosis compares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from perftracker.store.stack_frames import MainStack, StackFrame, main_stacks

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


def is_native(frame: StackFrame) -> bool:
    return frame.line <= 0 or ".so" in frame.short


def is_user(frame: StackFrame) -> bool:
    """A frame of the job's own Python code (not native, not a library or the standard library)."""
    return not is_native(frame) and not frame.file.startswith("<") and not _LIBRARY.search(frame.file)


def site(frame: StackFrame) -> str:
    return f"{frame.short}:{frame.line}" if not is_native(frame) else frame.short


def label(frame: StackFrame) -> str:
    name = frame.name if len(frame.name) <= 120 else frame.name[:117] + "..."  # C++ template names
    return f"{name} ({site(frame)})"


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


def collective_of(frames: Sequence[StackFrame], idle: bool) -> str:
    """The collective these frames wait in ("" if none)."""
    for f in frames:
        if f.file.endswith("distributed_c10d.py") and f.name in COLLECTIVES:
            return f.name
    for f in frames:
        if is_native(f) and any(marker in f.name for marker in _NATIVE_WAIT):
            return "c10d::Work::wait"
    if idle and any(f.name == "_engine_run_backward" for f in frames):
        return DDP_WAIT
    return ""


def rank_state(main: MainStack) -> RankState:
    frames = main.frames
    python = [f for f in frames if not is_native(f)]
    user = next((f for f in python if is_user(f)), python[0] if python else None)
    return RankState(rank=main.rank, host=main.host, pid=main.pid, idle=main.idle,
                     where=label(user) if user else "?", site=site(user) if user else "?",
                     innermost=label(frames[0]) if frames else "?", collective=collective_of(frames, main.idle),
                     frames=tuple(label(f) for f in frames))


def rank_states(look: Mapping[int, MainStack]) -> dict[int, RankState]:
    """rank -> RankState of one look at the ranks."""
    return {r: rank_state(m) for r, m in look.items()}


def signature(states: Mapping[int, RankState]) -> tuple[tuple[int, str, str], ...]:
    """What two looks at the ranks must share to be "the same picture": each rank's collective and,
    for a rank that waits or is idle, its innermost frame (native ones included), else its user frame."""
    return tuple(sorted((r, s.collective, s.innermost if s.waiting or s.idle else s.where)
                        for r, s in states.items()))


def still(states: Mapping[int, RankState], before: Mapping[int, int | None], after: Mapping[int, int | None],
          seconds: float) -> bool:
    """False when a rank that should be blocked woke up repeatedly between two looks `seconds` apart (its main
    thread's voluntary context switches, `before` -> `after`; docs/internals/analyzers.md)."""
    waiting = [r for r, s in states.items() if s.waiting]
    check = waiting if waiting and len(waiting) < len(states) else list(states)
    for r in check:
        b, a = before.get(r), after.get(r)
        if b is not None and a is not None and a - b > 2 + 0.5 * max(0.0, seconds):
            return False
    return True


def hang_pattern(states: Mapping[int, RankState]) -> str:
    """Why these stacks look hung ("" if they do not): all idle in one place, or a collective split."""
    if len(states) < 1:
        return ""
    waiting = {r: s for r, s in states.items() if s.waiting}
    others = sorted(r for r in states if r not in waiting)
    if waiting and others:
        first = waiting[min(waiting)]
        names = ", ".join(str(r) for r in sorted(waiting))
        where = "; ".join(f"rank {r} is at {states[r].where}" for r in others[:4])
        return f"ranks {names} wait in {first.collective} ({first.site}); {where}"
    if all(s.idle for s in states.values()) and len({s.innermost for s in states.values()}) == 1:
        one = next(iter(states.values()))
        what = f"in {one.collective} ({one.site})" if one.waiting else f"at {one.where}"
        return f"every rank ({len(states)}) is idle {what}"
    return ""


def switches_of(look: Mapping[int, MainStack]) -> dict[int, int | None]:
    """rank -> its main thread's voluntary context switches when dumped (None unknown)."""
    return {r: m.switches for r, m in look.items()}


def states_from_table(stacks: pd.DataFrame) -> dict[str, dict[int, RankState]]:
    """snapshot name -> rank -> RankState, from the `stacks` table (main threads only)."""
    return {snap: rank_states(look) for snap, look in main_stacks(stacks).items()}
