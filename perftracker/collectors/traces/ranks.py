"""Decide which rank (and which profiling window of it) each trace file is.

Promise: the rank is `distributedInfo.rank`, else a number in the file name (`rank_from_name`); files of one
rank whose time spans do not overlap are separate windows; two files claiming one rank in one window is an
error that lists them. Runs on one job's traces (`collectors.jobs` groups them first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from perftracker.errors import InputError
from perftracker.values import MAX_RANK, ascii_int

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker|proc|gpu)[-_.]?(\d+)(?:[^0-9]|$)", re.IGNORECASE)
# tensorboard_trace_handler: <host>_<pid>.<timestamp>.pt.trace.json
_TB_NAME = re.compile(r"^(?P<host>.+?)_(?P<pid>\d+)\.\d+\.pt\.trace\.json")


@dataclass
class TraceIdentity:
    path: Path
    rank: int | None  # None: the trace does not say
    rank_source: str  # distributedInfo | filename | assigned
    host: str
    world_size: int
    backend: str
    start_ns: int  # on the trace's own clock, for window separation
    end_ns: int
    window: int = 0


def rank_from_name(path: Path) -> int | None:
    """The rank a file name gives (`rank-3`, `worker3`, ...), None when none, or not a rank (past MAX_RANK)."""
    match = _RANK_IN_NAME.search(path.name)
    return ascii_int(match.group(1), 0, MAX_RANK) if match else None


def host_from_name(path: Path) -> str:
    match = _TB_NAME.match(path.name)
    return match.group("host") if match else ""


def guessed_hosts_note(identities: list[TraceIdentity]) -> list[str]:
    """A note when host names were guessed from file names (TensorBoard's `<host>_<pid>.<ts>.pt.trace.json`)
    rather than read from the traces (why: docs/internals/collectors.md)."""
    guessed = sorted({(i.host, i.rank if i.rank is not None else -1) for i in identities
                      if i.host and i.host == host_from_name(i.path)}, key=lambda x: (x[1], x[0]))
    if not guessed:
        return []
    hosts = sorted({h for h, _ in guessed})
    one_each = len(hosts) == len(guessed) > 1
    shown = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
    return [f"host names of {len(guessed)} trace(s) are guesses from their file names ({shown}: the part before "
            "'_<number>.<timestamp>.pt.trace.json'), not read from the traces"
            + ("; every rank has a host of its own, which host-level rules will believe" if one_each else "")
            + ". Give the real hosts with a run manifest, or ignore host-level groupings"]


def assign_windows(identities: list[TraceIdentity]) -> list[str]:
    """Number each rank's files as windows 0, 1, ... by start time; give unlabelled files free ranks.

    Returns notes for the user. Raises InputError when two files of one rank overlap in time.
    """
    notes: list[str] = guessed_hosts_note(identities)
    used = {i.rank for i in identities if i.rank is not None}
    next_free = 0
    for ident in sorted((i for i in identities if i.rank is None), key=lambda i: str(i.path)):
        while next_free in used:
            next_free += 1
        ident.rank, ident.rank_source = next_free, "assigned"
        used.add(next_free)
        notes.append(f"{ident.path}: no rank in the file (distributedInfo; for an Nsight export NCCL payload or RANK) "
                     f"or in its name; treated as rank {next_free}")
    by_rank: dict[int, list[TraceIdentity]] = {}
    for ident in identities:
        assert ident.rank is not None
        by_rank.setdefault(ident.rank, []).append(ident)
    for rank, group in sorted(by_rank.items()):
        group.sort(key=lambda i: (i.start_ns, str(i.path)))
        for a, b in zip(group, group[1:]):
            if b.start_ns < a.end_ns:
                raise InputError(
                    f"two trace files claim rank {rank} in the same time window: {a.path} and {b.path}; they "
                    "agree on everything that tells jobs apart (world size, devices, process groups, job id, "
                    "time), so they look like one job's rank twice",
                    "input",
                    "if one is a copy of the other, move it aside; if they are two runs of one job at once, "
                    "move each run's traces into a folder of its own",
                )
        for window, ident in enumerate(group):
            ident.window = window
        if len(group) > 1:
            notes.append(f"rank {rank} has {len(group)} profiling windows; they are analyzed separately")
    return notes
