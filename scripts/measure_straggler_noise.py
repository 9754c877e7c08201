"""Measure how ranks of the real sample job differ, clean and with one rank slowed, to size the
straggler analyzer's thresholds and the slow tests' jobs.

Promise: ``python scripts/measure_straggler_noise.py [-k 3] [--scenarios clean,inproc,stop,...]`` runs
each scenario ``k`` times as a real 4-rank torchrun gloo job (``scripts/sample_job_runner.run_job``)
and prints, per run and rank: the median step time and median forward (step files, steps after the
first two), and from the traces, matching the k-th ``gloo:all_reduce`` of every rank in every profiled
step: the share of collectives the rank arrived last at, its median lateness (its arrival minus the
earliest rank's, ms), its median arrival minus the median rank's arrival (ms; all ranks share this
host's clock) and the mean gap to the next-latest rank where it was last (ms per collective, one
collective per step here: the time the others waited for it alone, the analyzer's cost). Then, per scenario, the spread over runs of the slowed rank's numbers and of the worst
other rank's. ``--analyze`` also runs
``perftracker analyze`` and prints its straggler findings. ``--json FILE`` writes every number.

Scenarios: ``clean`` (no slowdown), ``inproc`` (rank ``--inproc-rank`` does ``--slow-factor`` times the
forward compute), ``stop`` (SIGSTOP duty cycle on ``--outside-rank``), ``cores`` (that rank pinned to a
core with busy loops, the others kept off it), ``quota`` (cgroup CPU quota on that rank).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from disturb import CoreContention, CpuQuota, DutyCycle
from sample_job_runner import REPO, run_job

SCENARIOS = ("clean", "inproc", "stop", "cores", "quota")


def collective_arrivals(run_dir: Path, name: str = "gloo:all_reduce") -> dict[tuple[int, int], dict[int, int]]:
    """(step, k) -> {rank: start_ns} for the k-th `name` collective of each rank in each profiled step,
    kept only where every rank has it."""
    from perftracker.collectors.loading import LoadOptions, load_path

    store = load_path(run_dir, LoadOptions(workers=1))
    events = store.events
    coll = events[(events["kind"] == "collective_cpu") & (events["name"] == name)]
    coll = coll.sort_values(["rank", "start_ns"])
    coll = coll.assign(k=coll.groupby(["rank", "step"]).cumcount())
    ranks = {int(r) for r in events["rank"].unique()}
    matched: dict[tuple[int, int], dict[int, int]] = {}
    for (step, k), group in coll.groupby(["step", "k"]):
        arrivals = {int(r): int(s) for r, s in zip(group["rank"], group["start_ns"])}
        if set(arrivals) == ranks:
            matched[(int(step), int(k))] = arrivals
    return matched


def lateness(matched: dict[tuple[int, int], dict[int, int]]) -> dict[int, dict[str, float]]:
    """Per rank: share of matched collectives it arrived last at, median lateness vs the earliest rank and
    vs the median arrival (ms; negative: earlier than the median), and the mean over collectives of the
    gap to the next-latest rank where it was last (ms; the analyzer's cost, per step at one per step)."""
    per_rank: dict[int, list[float]] = {}
    vs_median: dict[int, list[float]] = {}
    last: dict[int, int] = {}
    gap: dict[int, float] = {}  # ms the others waited for the rank beyond the next-latest, summed
    for arrivals in matched.values():
        first = min(arrivals.values())
        middle = statistics.median(arrivals.values())
        latest = max(arrivals, key=lambda r: arrivals[r])
        last[latest] = last.get(latest, 0) + 1
        runner_up = sorted(arrivals.values())[-2] if len(arrivals) > 1 else arrivals[latest]
        gap[latest] = gap.get(latest, 0.0) + (arrivals[latest] - runner_up) / 1e6
        for rank, start in arrivals.items():
            per_rank.setdefault(rank, []).append((start - first) / 1e6)
            vs_median.setdefault(rank, []).append((start - middle) / 1e6)
    n = max(1, len(matched))
    return {
        rank: {"share_last": last.get(rank, 0) / n, "median_lateness_ms": statistics.median(values),
               "median_vs_median_ms": statistics.median(vs_median[rank]),
               "gap_ms_per_coll": gap.get(rank, 0.0) / n, "n": len(values)}
        for rank, values in sorted(per_rank.items())
    }


def step_stats(run_dir: Path, skip: int = 2) -> dict[int, dict[str, float]]:
    """Per rank: median step time and median forward (ms) over the steps after the first `skip`."""
    out: dict[int, dict[str, float]] = {}
    for path in sorted((run_dir / "steps").glob("rank-*.jsonl")):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()][skip:]
        rank = int(records[0]["rank"])
        out[rank] = {
            "median_step_ms": statistics.median((r["end_ns"] - r["start_ns"]) / 1e6 for r in records),
            "median_forward_ms": statistics.median(r["phases_ns"]["forward"] / 1e6 for r in records),
            "median_backward_ms": statistics.median(r["phases_ns"]["backward"] / 1e6 for r in records),
        }
    return out


def straggler_findings(run_dir: Path, out: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "perftracker", "analyze", str(run_dir), "-o", str(out), "--no-cache"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    path = out / "findings.json"
    if not path.is_file():
        return [{"error": f"analyze exited {proc.returncode}: {proc.stderr[-500:]}"}]
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        {k: f.get(k) for k in ("severity", "ranks", "title")}
        | {"evidence": {k: f.get("evidence", {}).get(k)
                        for k in ("kind", "share_last", "median_lateness_ms")}}
        for f in data.get("findings", []) if f.get("analyzer") == "straggler"
    ]


def scenario_setup(name: str, args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """run_job keyword arguments and the slowed rank (-1: none) for scenario `name`."""
    disturb: Callable[..., None] | None = None
    if name == "clean":
        return {}, -1
    if name == "inproc":
        return {"slow_rank": args.inproc_rank, "slow_factor": args.slow_factor}, args.inproc_rank
    if name == "stop":
        disturb = DutyCycle(args.outside_rank, stopped=args.stopped, period_s=args.period)
    elif name == "cores":
        disturb = CoreContention(args.outside_rank, competitors=args.competitors)
    elif name == "quota":
        if not CpuQuota.available():
            raise SystemExit("quota: /sys/fs/cgroup/cpu is not writable here")
        disturb = CpuQuota(args.outside_rank, share=args.share)
    else:
        raise SystemExit(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    return {"disturb": disturb}, args.outside_rank


def summarize(runs: list[dict[str, Any]], victim: int) -> str:
    def spread(values: list[float], fmt: str) -> str:
        return f"{fmt.format(min(values))}..{fmt.format(max(values))}" if values else "-"

    v_share = [r["ranks"][victim]["share_last"] for r in runs if victim >= 0]
    v_late = [r["ranks"][victim]["median_lateness_ms"] for r in runs if victim >= 0]
    v_rel = [r["ranks"][victim]["median_lateness_ms"] / r["ranks"][victim]["median_step_ms"]
             for r in runs if victim >= 0]
    o_share = [max(v["share_last"] for k, v in r["ranks"].items() if k != victim) for r in runs]
    o_late = [max(v["median_lateness_ms"] for k, v in r["ranks"].items() if k != victim) for r in runs]
    o_rel = [max(v["median_lateness_ms"] / v["median_step_ms"] for k, v in r["ranks"].items() if k != victim)
             for r in runs]
    v_med = [r["ranks"][victim]["median_vs_median_ms"] for r in runs if victim >= 0]
    v_gap = [r["ranks"][victim]["gap_ms_per_coll"] / r["ranks"][victim]["median_step_ms"]
             for r in runs if victim >= 0]
    o_gap = [max(v["gap_ms_per_coll"] / v["median_step_ms"] for k, v in r["ranks"].items() if k != victim)
             for r in runs]
    o_med = [max(v["median_vs_median_ms"] for k, v in r["ranks"].items() if k != victim) for r in runs]
    step = [statistics.median(v["median_step_ms"] for v in r["ranks"].values()) for r in runs]
    lines = [f"  step ms (median over ranks): {spread(step, '{:.1f}')}"]
    if victim >= 0:
        lines.append(f"  slowed rank {victim}: share_last {spread(v_share, '{:.2f}')}, "
                     f"median lateness ms {spread(v_late, '{:.1f}')}, lateness/step {spread(v_rel, '{:.2f}')}, "
                     f"vs median ms {spread(v_med, '{:.1f}')}, gap/step {spread(v_gap, '{:.2f}')}")
    lines.append(f"  worst other rank: share_last {spread(o_share, '{:.2f}')}, "
                 f"median lateness ms {spread(o_late, '{:.1f}')}, lateness/step {spread(o_rel, '{:.2f}')}, "
                 f"vs median ms {spread(o_med, '{:.1f}')}, gap/step {spread(o_gap, '{:.2f}')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", type=int, default=3, help="runs per scenario")
    parser.add_argument("--scenarios", default="clean,inproc,stop,cores", help=f"from {','.join(SCENARIOS)}")
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--profile-steps", type=int, default=16)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--inproc-rank", type=int, default=2)
    parser.add_argument("--slow-factor", type=float, default=4.0)
    parser.add_argument("--outside-rank", type=int, default=1)
    parser.add_argument("--stopped", type=float, default=0.6, help="stop: fraction of each period stopped")
    parser.add_argument("--period", type=float, default=0.05, help="stop: duty-cycle period, s")
    parser.add_argument("--competitors", type=int, default=2, help="cores: busy loops on the rank's core")
    parser.add_argument("--share", type=float, default=0.25, help="quota: share of one core")
    parser.add_argument("--analyze", action="store_true", help="also run perftracker analyze")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args(argv)

    results: dict[str, list[dict[str, Any]]] = {}
    victims: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="straggler-noise-") as tmp:
        for name in args.scenarios.split(","):
            kwargs, victims[name] = scenario_setup(name, args)
            for i in range(args.k):
                run_dir = Path(tmp) / f"{name}-{i}"
                t0 = time.monotonic()
                run_job(run_dir, nproc=args.nproc, steps=args.steps, profile_steps=args.profile_steps,
                        width=args.width, depth=args.depth, batch=args.batch, timeout=180, **kwargs)
                wall = time.monotonic() - t0
                steps = step_stats(run_dir)
                late = lateness(collective_arrivals(run_dir))
                run: dict[str, Any] = {"run": i, "wall_s": round(wall, 1),
                                       "ranks": {r: steps[r] | late.get(r, {}) for r in sorted(steps)}}
                if args.analyze:
                    run["findings"] = straggler_findings(run_dir, Path(tmp) / f"{name}-{i}-out")
                results.setdefault(name, []).append(run)
                print(f"{name} run {i} ({wall:.1f} s, {late[0]['n'] if late else 0} matched collectives)")
                for rank, v in run["ranks"].items():
                    mark = " <- slowed" if rank == victims[name] else ""
                    print(f"  rank {rank}: step {v['median_step_ms']:6.1f} ms  fwd {v['median_forward_ms']:6.1f}"
                          f"  bwd {v['median_backward_ms']:6.1f}  last {v.get('share_last', 0):.2f}"
                          f"  late {v.get('median_lateness_ms', 0):6.1f} ms"
                          f"  vs-median {v.get('median_vs_median_ms', 0):6.1f} ms"
                          f"  gap {v.get('gap_ms_per_coll', 0):5.1f} ms{mark}")
                if args.analyze:
                    print(f"  straggler findings: {run['findings']}")
                sys.stdout.flush()
            print(f"{name}: spread over {args.k} runs")
            print(summarize(results[name], victims[name]))
            sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "victims": victims, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
