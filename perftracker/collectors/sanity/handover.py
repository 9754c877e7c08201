"""Handing `perftracker sanity`'s results to the one rank that writes them, through the rendezvous store.

Promise: one writer per output, on a shared folder too: `post` / `gather` move the results, a `Lease` and
`claim` pick the writer, `wait_for_writer` lets another rank take over only when rank 0 is dead, not slow;
failures are returned, never raised. The protocol: docs/internals/collectors.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

from perftracker.collectors.sanity.comm import KEY, Comm

RENEW_S = 0.5
LAPSE_S = 3.0
LEFT_S = 3.0  # the writer waits this long at most for the other ranks to see that it wrote
_LEASE = f"{KEY}/lease"
_WRITER = f"{KEY}/writer"
_WRITTEN = f"{KEY}/written"
_ERRORS = (RuntimeError, ValueError)


def post(comm: Comm, result: Mapping[str, Any]) -> bool:
    """Leave this rank's result for the writer (a no-op alone); False when the store no longer answers."""
    if comm.store is None:
        return True
    try:
        comm.store.set(f"{KEY}/result/{comm.launch.rank}", json.dumps(result))
    except _ERRORS:  # the store lived with a node that died
        return False
    return True


def gather(comm: Comm, own: Mapping[str, Any], deadline: float) -> dict[int, dict[str, Any]]:
    """Every rank's result that arrived by `deadline` (time.monotonic()), this rank's own included."""
    got: dict[int, dict[str, Any]] = {comm.launch.rank: dict(own)}
    missing = [r for r in range(comm.launch.world) if r not in got]
    while missing and comm.store is not None:
        for r in list(missing):
            try:
                if comm.store.check([f"{KEY}/result/{r}"]):
                    got[r] = json.loads(comm.store.get(f"{KEY}/result/{r}"))
                    missing.remove(r)
            except _ERRORS:
                continue
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    return got


class Lease:
    """A thread renewing the writer's lease in the store (see the module) until `stop()`."""

    def __init__(self, comm: Comm) -> None:
        self._store = comm.store
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="sanity-lease", daemon=True)
        if self._store is not None:
            self._thread.start()

    def _renew(self) -> None:
        while not self._stop.is_set():
            try:
                self._store.add(_LEASE, 1)
            except _ERRORS:
                return  # the store is gone: there is nothing left to hold
            self._stop.wait(RENEW_S)

    def stop(self) -> None:
        self._stop.set()


def claim(comm: Comm, expected: str = "") -> bool | None:
    """True when this rank now holds the right to write (the store's compare-and-set from `expected`: '' for
    the first claim, the lapsed holder's rank for a take-over), False when another rank holds it, None when the
    store no longer answers."""
    me = str(comm.launch.rank)
    try:
        got = comm.store.compare_set(_WRITER, expected, me)
    except _ERRORS:
        return None
    return bool((got.decode() if isinstance(got, bytes) else str(got)) == me)


def mark_written(comm: Comm) -> None:
    """Say that the outputs are written (the other ranks stop waiting)."""
    if comm.store is not None:
        with contextlib.suppress(*_ERRORS):
            comm.store.set(_WRITTEN, "1")


def wait_left(comm: Comm, ranks: list[int], within_s: float = LEFT_S) -> list[int]:
    """After `mark_written`: wait (at most `within_s`) until `ranks` saw it, so that the store (which may live
    with this rank's node and end with it) outlives their last look; the ranks that did not say so."""
    deadline = time.monotonic() + within_s
    waiting = [r for r in ranks if r != comm.launch.rank]
    while waiting and comm.store is not None:
        try:
            waiting = [r for r in waiting if not comm.store.check([f"{KEY}/left/{r}"])]
        except _ERRORS:
            return waiting
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return waiting


def wait_for_writer(comm: Comm, own: Mapping[str, Any], deadline: float,
                    hard_end: float) -> tuple[dict[int, dict[str, Any]], Lease | None] | None:
    """See the module docstring: on the rank that takes the writer's place, the results to write and its lease
    (running: stop it once written), else None."""
    if comm.store is None or comm.launch.rank == 0:
        return None
    seen, moved_at = -1, time.monotonic()
    while time.monotonic() < hard_end:
        try:
            if comm.store.check([_WRITTEN]):
                comm.store.set(f"{KEY}/left/{comm.launch.rank}", "1")  # the writer may let the store go now
                return None
            count = int(comm.store.add(_LEASE, 0))
            holder = comm.store.get(_WRITER).decode() if comm.store.check([_WRITER]) else ""
        except _ERRORS:
            got = _over_group(comm, own)  # the store lived with rank 0's node
            return (got, None) if got is not None else None
        now = time.monotonic()
        if count != seen:
            seen, moved_at = count, now
        elif now - moved_at >= LAPSE_S:  # the holder is dead, not slow: the store says so and one rank wins
            if claim(comm, holder):
                lease = Lease(comm)
                return gather(comm, own, max(deadline, now)), lease
            moved_at = now  # another rank took over: its lease runs now
        time.sleep(0.2)
    return None


def _over_group(comm: Comm, own: Mapping[str, Any]) -> dict[int, dict[str, Any]] | None:
    group = comm.groups.get("others")
    me = comm.launch.rank
    others = [r for r in range(comm.launch.world) if comm.hosts[r] != comm.hosts[0]]
    if group is None:  # alone off rank 0's node, or on it (its ranks are presumed gone with it)
        return {me: dict(own)} if others == [me] else None
    dst = min(others)
    out: list[Any] | None = [None] * len(others) if me == dst else None
    try:
        dist.gather_object(dict(own), out, dst=dst, group=group)
    except _ERRORS:  # another node died too: nobody can say it has every result
        return None
    return {int(r["rank"]): r for r in out if isinstance(r, dict)} if out is not None else None


def release_agents(comm: Comm) -> bool:
    """Complete torchrun's exit barrier in the place of agents that died (see the module); True when done. Only
    under torchrun (TORCHELASTIC_RUN_ID) with the agents' store (the default group's store wraps it)."""
    if comm.store is None or not os.environ.get("TORCHELASTIC_RUN_ID"):
        return False
    try:
        from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
        from torch.distributed.elastic.utils.store import _LAST_MEMBER_CHECKIN
    except ImportError:  # another torch: its agents wait out their own barrier
        return False
    raw = comm.store
    while getattr(raw, "underlying_store", None) is not None:  # the worker's prefixes: down to the TCP store
        raw = raw.underlying_store
    try:  # the static rendezvous keys the agents' store by the run id (torch.distributed.elastic.rendezvous)
        dist.distributed_c10d.PrefixStore(os.environ["TORCHELASTIC_RUN_ID"], raw).set(
            _TERMINAL_STATE_SYNC_ID + _LAST_MEMBER_CHECKIN, "<val_ignored>")
    except _ERRORS:
        return False
    return True
