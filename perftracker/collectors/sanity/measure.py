"""One rank's whole `perftracker sanity` measurement, within the time box.

Promise: `plan_for(time_box_s, device)` splits the box between the phases (device figures, collectives,
pairwise rounds, gathering) and sets the collective timeout so that a dead or hung peer costs one timeout and
the command still ends within the box plus that timeout at most. `measure(launch, plan, host, node)` runs
the phases in order on this rank (device figures; the collectives over all ranks, within each node, between
nodes; the node pairs; the box counts from the moment every rank has joined; joining may take
up to `join_s`, since nodes start at different times) and returns its result record (JSON-ready); `comm` errors are recorded in
it, never raised. The record's schema: rank, local_rank, host, device, device_name, figures, errors, pairs,
node (the leader's node facts, else {}), joined_after_s (the wait to join), elapsed_s (since joining).
The test hook $PERFTRACKER_SANITY_TEST_FAIL (`<rank>:<figure>`) turns a figure of a rank into a failure.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from perftracker.collectors.sanity import DEFAULT_S, QUICK_S  # noqa: F401 - re-exported
from perftracker.collectors.sanity.bench import device_figures
from perftracker.collectors.sanity.comm import Comm, Launch

TEST_FAIL_VAR = "PERFTRACKER_SANITY_TEST_FAIL"  # "<rank>:<figure>,...": that rank's figure fails (tests only)


def injected_failures(env: Mapping[str, str], rank: int) -> list[str]:
    """The figures the test hook $PERFTRACKER_SANITY_TEST_FAIL makes fail on `rank` (a device that errors, on
    demand: tests of what follows a failed check)."""
    out = []
    for item in env.get(TEST_FAIL_VAR, "").split(","):
        who, _, figure = item.strip().partition(":")
        if who.strip().isdigit() and int(who) == rank and figure.strip():
            out.append(figure.strip())
    return out


@dataclass(frozen=True)
class Plan:
    """How the time box is spent (seconds, bytes, counts)."""

    time_box_s: float
    join_s: float
    device_s: float
    timeout_s: float
    coll_bytes: int
    coll_iters: int
    latency_iters: int
    pair_bytes: int
    pair_reps: int
    pair_tours: int


def plan_for(time_box_s: float, device: torch.device) -> Plan:
    """The phases' shares of `time_box_s` (see the module docstring)."""
    gpu = device.type == "cuda"
    short = time_box_s <= 30
    return Plan(time_box_s=time_box_s, join_s=max(60.0, time_box_s), device_s=0.2 * time_box_s, timeout_s=max(8.0, 0.2 * time_box_s),
                coll_bytes=(256 << 20) if gpu else (1 << 20) if short else (4 << 20),
                coll_iters=5 if short else 20, latency_iters=20 if short else 100,
                pair_bytes=(64 << 20) if gpu else (1 << 20), pair_reps=4 if short else 10, pair_tours=3 if short else 5)


def device_for(local_rank: int) -> torch.device:
    """cuda:<local rank modulo the devices> when CUDA is present, else the CPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def measure(launch: Launch, plan: Plan, host: str, node: dict[str, Any], device: torch.device,
            started: float) -> tuple[Comm | None, dict[str, Any]]:
    """This rank's record (see the module docstring); `started` is time.monotonic() at the command's start."""
    record: dict[str, Any] = {"rank": launch.rank, "local_rank": launch.local_rank, "host": host,
                              "device": str(device), "device_name": "", "figures": {}, "errors": {}, "pairs": [],
                              "node": {}}
    comm: Comm | None = None
    try:
        comm = Comm.start(launch, device, host, plan.timeout_s, plan.join_s)
        if launch.world > 1:
            print(f"perftracker sanity: rank {launch.rank} joined ({launch.world} ranks, {len(comm.nodes)} nodes)",
                  file=sys.stderr, flush=True)
    except (RuntimeError, ValueError) as exc:  # the rendezvous failed: measure alone, report what we can
        record["errors"]["join"] = f"{type(exc).__name__}: {exc}"[:300]
    if comm is not None:
        record["joined_after_s"] = round(comm.joined_at - started, 3)
    figures = device_figures(str(device), plan.device_s)
    record["device_name"] = figures.name
    record["figures"].update(figures.figures)
    record["errors"].update(figures.errors)
    for figure in injected_failures(os.environ, launch.rank):
        record["figures"].pop(figure, None)
        record["errors"][figure] = f"RuntimeError: injected by {TEST_FAIL_VAR} (a test hook)"
    if comm is not None:
        for scope in ("", "node", "inter"):  # all ranks; within each node; between nodes (one rank each)
            if scope == "inter" and any(k.startswith(("allreduce", "allgather")) for k in record["errors"]):
                continue  # a peer is gone: the nodes' group would only wait out the timeout again
            coll = comm.collectives(plan.coll_bytes, plan.coll_iters, plan.latency_iters, scope)
            record["figures"].update(coll.figures)
            record["errors"].update(coll.errors)
        record["pairs"] = [asdict(p) for p in comm.pairwise(plan.pair_bytes, plan.pair_reps, plan.pair_tours)]
        if comm.hosts and comm.leaders() and launch.rank in comm.leaders():
            record["node"] = node
    else:
        record["node"] = node
    record["elapsed_s"] = round(time.monotonic() - (comm.joined_at if comm is not None else started), 3)
    return comm, record
