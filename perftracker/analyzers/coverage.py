"""What an analysis could judge, from which inputs, and what it could not for lack of them.

`coverage(analysis)` returns one `Area` per kind of problem perftracker looks for, judged (with its inputs) or
not (with the input that would make it judgeable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.online.baseline_shift import judgeable as against_baseline
from perftracker.analyzers.stepgraph.replay_costs import replay_steps_view
from perftracker.analyzers.stragglers.stack_profile import judgeable
from perftracker.analyzers.stragglers.steps import step_stats_view
from perftracker.store import Store

_TRACE_HINT = ("a PyTorch profiler trace per rank (attach --trace-steps N on jobs launched with "
               "KINETO_USE_DAEMON=1 or the perftracker hook)")


@dataclass(frozen=True)
class Area:
    name: str
    judged: bool
    sources: tuple[str, ...]  # inputs it rested on, when judged
    needs: str  # what would make it judgeable, when not
    listed_unjudged: bool = True  # False: only worth naming when judged (crashes of a job that may still run)

    def to_dict(self) -> dict[str, Any]:
        if self.judged:
            return {"area": self.name, "from": list(self.sources)}
        return {"area": self.name, "needs": self.needs}


def _present(**sources: bool) -> tuple[str, ...]:
    return tuple(name.replace("_", " ") for name, there in sources.items() if there)


def coverage(analysis: Analysis) -> list[Area]:
    store = analysis.store
    kinds = set(store.event_columns(["kind"])["kind"].astype(str).unique()) if store.n_events else set()
    counters = store["counters"]
    gpu_rows = counters["device"].astype(str).str.startswith("gpu:") if len(counters) else None
    has_gpu = bool(gpu_rows is not None and gpu_rows.any())
    has_rdma = bool(gpu_rows is not None and (~gpu_rows).any())
    sysfs_rdma = any(node.get("rdma") for node in store.run_info.sysfs)
    traces = not store.ranks.empty
    step_files = bool(len(store.steps)) and "stepfile" in set(store.steps["source"].astype(str))
    # comparing ranks needs two of them (a median rank for sampled stacks: MIN_RANKS with enough samples)
    trace_ranks = store.ranks["rank"].nunique() >= 2
    step_ranks = step_files and store.steps.loc[store.steps["source"].astype(str) == "stepfile", "rank"].nunique() >= 2
    config = not store["config"].empty
    nccl_log = not store["nccl"].empty
    stacks = not store["stacks"].empty
    flight = not store["collectives_fr"].empty
    failures = not store["failures"].empty
    sampled = judgeable(analysis) or against_baseline(analysis)  # a median rank, or the watcher's baseline window
    inspector = store["nccl_collectives"]["rank"].nunique() >= 2  # NCCL Inspector records of two ranks or more
    states = store["proc_states"]["rank"].nunique() >= 2  # the ranks' sampled scheduler states (a --watch incident)
    return [
        Area("stragglers and step time", trace_ranks or step_ranks or sampled or inspector or states,
             _present(traces=trace_ranks, step_times=step_ranks, sampled_stacks=sampled, NCCL_Inspector=inspector,
                      scheduler_states=states),
             f"{_TRACE_HINT}, or step times (the hook, or attach --job-log with the job's log), of at least "
             "two ranks"),
        Area("GPU kernels, overlap and idle time", bool(kinds & {"compute", "comm"}), _present(GPU_traces=True),
             f"{_TRACE_HINT}, taken on GPUs" if not traces else
             "traces with GPU kernel events (these have kernel launches but no kernel events: see the inputs finding)"
             if "runtime" in kinds else "traces with GPU kernels (these have CPU events only)"),
        Area("NCCL configuration", config or nccl_log, _present(environment=config, NCCL_log=nccl_log),
             "the job's environment (attach captures it) or an NCCL_DEBUG=INFO log"),
        Area("GPU health", has_gpu, _present(GPU_samples=True),
             "NVML samples (attach on a GPU host), nvidia-smi --query-gpu CSV or DCGM exporter samples"),
        Area("RDMA network", has_rdma or sysfs_rdma, _present(port_counters=has_rdma, sysfs=sysfs_rdma),
             "RDMA port counters (attach on a host with /sys/class/infiniband, or copies of its counters)"),
        Area("Ethernet network", not store["netdev"].empty, _present(interface_counters=True),
             "interface counters of the job's hosts (attach and run sample them; or `ip -s link` / /sys/class/net "
             "dumps with time lines, node exporter node_network_* samples)", listed_unjudged=False),
        Area("hangs", stacks or flight, _present(stacks=stacks, flight_recorder=flight),
             "Python stacks (attach takes them) or flight-recorder dumps (perftracker run)"),
        Area("crashes", failures, _present(job_logs=failures),
             "the job's output and error files (perftracker run or postmortem)", listed_unjudged=False),
    ]


def coverage_dict(areas: list[Area]) -> dict[str, list[dict[str, Any]]]:
    return {"judged": [a.to_dict() for a in areas if a.judged],
            "not_judged": [a.to_dict() for a in areas if not a.judged and a.listed_unjudged]}


def known_ranks(store: Store) -> list[int]:
    """Every rank any input names (traces, step files, environments, NCCL logs, stacks, failures)."""
    found: set[int] = set()
    for table in ("ranks", "steps", "config", "nccl", "stacks", "collectives_fr", "nccl_collectives"):
        found |= {int(r) for r in store[table]["rank"].unique()}
    return sorted(r for r in found if r >= 0)


def known_hosts(store: Store) -> list[str]:
    """Every host any input names."""
    found: set[str] = set()
    for table in ("ranks", "config", "nccl", "stacks", "counters", "netdev", "nccl_collectives"):
        found |= {str(h) for h in store[table]["host"].dropna().unique()}
    return sorted(h for h in found if h and h != "<NA>")


RUN_SUMMARY_COLUMNS = ["ranks", "hosts", "host_names", "step_ranks", "step_median_s", "step_p90_s",
                       "step_fastest_rank_s", "step_slowest_rank_s", "step_source", "replay_error", "replay_steps"]


def run_summary_view(analysis: Analysis) -> pd.DataFrame:
    """One row, the report's summary strip: ranks and hosts of the job (every input counted), step time (the
    median of the per-rank medians), its p90 (the median of the per-rank p90s), and the fastest and slowest
    rank's median step: the spread across ranks, NaN below two ranks with steps (a single rank has no
    spread across ranks to tell); the what-if replay's median relative error against the measured step times
    and the steps replayed (NaN and 0 when no step could be replayed)."""
    store = analysis.store
    stats = analysis.view(step_stats_view)
    fit = analysis.view(replay_steps_view)
    errors = fit["error"].dropna() if not fit.empty else pd.Series(dtype=float)
    hosts = known_hosts(store)
    many = len(stats) > 1
    row: dict[str, Any] = {
        "ranks": len(known_ranks(store)), "hosts": len(hosts), "host_names": ", ".join(hosts[:16]),
        "step_ranks": len(stats),
        "step_median_s": float(stats["median_s"].median()) if not stats.empty else math.nan,
        "step_p90_s": float(stats["p90_s"].median()) if not stats.empty else math.nan,
        "step_fastest_rank_s": float(stats["median_s"].min()) if many else math.nan,
        "step_slowest_rank_s": float(stats["median_s"].max()) if many else math.nan,
        "step_source": str(stats["source"].iloc[0]) if not stats.empty else "",
        "replay_error": float(errors.median()) if len(errors) else math.nan, "replay_steps": int(len(errors)),
    }
    return pd.DataFrame([row], columns=RUN_SUMMARY_COLUMNS)
