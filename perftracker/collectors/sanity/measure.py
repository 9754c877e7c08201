"""One rank's whole `perftracker sanity` measurement, within the time box.

Promise: `plan_for(time_box_s, device)` splits the box between the phases, each with a deadline; `new_record`
is the JSON-ready record that `measure(...)` fills in place as it goes; `comm` errors are recorded, never
raised. Phases and record fields: docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from perftracker.collectors.sanity import DEFAULT_S, QUICK_S, join_s  # noqa: F401 - re-exported
from perftracker.collectors.sanity.bench import device_figures
from perftracker.collectors.sanity.comm import Comm
from perftracker.collectors.sanity.cpu_facts import cpu_during, cpu_sample
from perftracker.collectors.sanity.launch import Launch

REPEATS = 3
# shares of the box: the phases' deadlines; the watchdog's end of measuring; the latest a non-writer stays
DEVICE_END, COLL_END, PAIRS_END, GATHER_END, WATCHDOG_END, HARD_END = 0.3, 0.55, 0.75, 0.85, 0.95, 1.2
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
    return Plan(time_box_s=time_box_s, join_s=join_s(time_box_s), device_s=0.2 * time_box_s, timeout_s=max(8.0, 0.2 * time_box_s),
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


def new_record(launch: Launch, host: str, device: torch.device) -> dict[str, Any]:
    """This rank's record before anything is measured (see the module docstring)."""
    return {"rank": launch.rank, "local_rank": launch.local_rank, "host": host, "device": str(device),
            "device_name": "", "figures": {}, "repeats": {}, "errors": {}, "pairs": [], "cut": [], "cpu": {},
            "node": {}}


def measure(launch: Launch, plan: Plan, host: str, node: dict[str, Any], device: torch.device,
            started: float, record: dict[str, Any], comm: Comm | None) -> None:
    """Fill `record` (see the module docstring); `started` is time.monotonic() at the command's start and `comm`
    the joined group (None: alone, or the rendezvous failed)."""
    if comm is not None:
        record["joined_after_s"] = round(comm.joined_at - started, 3)
    t0 = comm.joined_at if comm is not None else started
    box = plan.time_box_s

    def sync() -> None:
        if comm is not None and "barrier" not in record["errors"]:  # a broken group: one timeout, not three
            why = comm.barrier()
            if why:
                record["errors"].setdefault("barrier", why)

    before = cpu_sample()
    figures = device_figures(str(device), plan.device_s, repeats=REPEATS, sync=sync)
    record["cpu"] = cpu_during(before, cpu_sample())
    record["device_name"] = figures.name
    record["figures"].update(figures.figures)
    record["repeats"].update({k: [round(v, 6) for v in vs] for k, vs in figures.repeats.items()})
    record["errors"].update(figures.errors)
    for figure in injected_failures(os.environ, launch.rank):
        record["figures"].pop(figure, None)
        record["errors"][figure] = f"RuntimeError: injected by {TEST_FAIL_VAR} (a test hook)"
    if comm is not None:
        for scope in ("", "node", "inter"):  # all ranks; within each node; between nodes (one rank each)
            if scope == "inter" and any(k.startswith(("allreduce", "allgather")) for k in record["errors"]):
                continue  # a peer is gone: the nodes' group would only wait out the timeout again
            if comm.barrier(scope):
                continue
            coll = comm.collectives(plan.coll_bytes, plan.coll_iters, plan.latency_iters, scope,
                                    deadline=t0 + COLL_END * box)
            record["figures"].update(coll.figures)
            record["errors"].update(coll.errors)
            record["cut"].extend(coll.cut)
        if not comm.barrier("inter" if "inter" in comm.groups else ""):
            pairs = comm.pairwise(plan.pair_bytes, plan.pair_reps, plan.pair_tours, deadline=t0 + PAIRS_END * box)
            record["pairs"] = [asdict(p) for p in pairs]
            cut = [f"{p.a}-{p.b}" for p in pairs if p.cut]
            if cut:
                record["cut"].append(f"node pairs not measured (time box): {', '.join(cut)}")
        if comm.hosts and comm.leaders() and launch.rank in comm.leaders():
            record["node"] = node
    else:
        record["node"] = node
    record["elapsed_s"] = round(time.monotonic() - t0, 3)
