"""How often a rank with a 10-20% compute excess is named from 6 real profiled steps, and how often a clean run warns.

Promise: ``python scripts/measure_excess.py [FOLDER] [--json FILE]`` reads the corpus at ``FOLDER`` (default
``tests/fixtures/accuracy_excess``, recorded by ``scripts/record_excess_runs.py``) and, for every run, from its
traces alone (as ``scripts/measure_accuracy.py`` does in its ``traces`` mode, ``perftracker.analyze``):

* ``named``: an excess run whose slowed rank is named: a ``straggler`` finding of severity warning or critical
  whose ranks are exactly that rank;
* ``loud``: a clean run with any warning/critical finding of the straggler-type analyzers
  (``measure_accuracy.ANALYZERS``): a false warning;
* what the traces show: each rank's compute per step (``op_work.compute_trials``: its ops at their shortest own
  time) and its wall-clock own work between collectives (``significance.work_trials``), as the median over steps of
  the slowed rank's (for a clean run: the highest rank's) over the median of the others', and the three tests'
  verdicts one by one (last arrival, wall-clock work, compute).

Runs are split in two halves by the number at the end of their name (even: the half the thresholds were chosen on,
odd: held out); the table gives both halves and the whole. ``measure(folder)`` returns the same as a dict, for
tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _path in (REPO, REPO / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import measure_accuracy  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "accuracy_excess"
LOUD = ("warning", "critical")


def half_of(name: str) -> str:
    """'tune' for runs whose trailing number is even, 'held-out' for odd ones."""
    return "tune" if int(name.rsplit("-", 1)[1]) % 2 == 0 else "held-out"


def _ratio(table: Any, rank: int | None) -> tuple[int, float]:
    """(rank, its median value over steps / the median of the other ranks' medians); the top rank if None."""
    grid = table.pivot_table(index="trial", columns="rank", values="value")
    med = grid.median()
    if rank is None:
        rank = int(max(med.index, key=lambda r: med[r] / statistics.median(med.drop(r))))
    return rank, float(med[rank] / statistics.median(med.drop(rank)))


def inspect(analysis: Any, slowed: int | None) -> dict[str, Any]:
    """What the traces show and each test's verdict (see the module docstring), read off `analysis` (an
    `Analysis` of the run's traces-only copy, the one its findings came from)."""
    from perftracker.analyzers.stragglers.collectives import arrivals_view
    from perftracker.analyzers.stragglers.op_work import compute_trials
    from perftracker.analyzers.stragglers.significance import work_trials
    from perftracker.analyzers.stragglers.straggler import compute_view, durations_view, verdict_view

    compute_rank, compute = _ratio(compute_trials(analysis.store.events), slowed)
    work_rank, work = _ratio(work_trials(analysis.view(arrivals_view).arrivals), slowed)
    last, wall, ops = analysis.view(verdict_view), analysis.view(durations_view), analysis.view(compute_view)
    return {"compute_ratio": round(compute, 4), "compute_rank": compute_rank,
            "work_ratio": round(work, 4), "work_rank": work_rank,
            "last_arrival": list(last.ranks) if last.significant else [],
            "wall_work": [wall.rank] if wall.significant else [], "wall_work_p": round(wall.p_family, 5),
            "compute_test": [ops.rank] if ops.significant else [], "compute_p": round(ops.p_family, 5),
            "compute_excess": round(ops.relative_excess, 4)}


def measure(folder: Path = CORPUS, progress: bool = False) -> dict[str, Any]:
    """Every run's outcome and the tallies per half (see the module docstring)."""
    runs = measure_accuracy.read_corpus(folder)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="perftracker-excess-") as tmp:
        for run in runs:
            outcome = measure_accuracy.analyze(run, "traces", Path(tmp), partial(inspect, slowed=run.slowed_rank))
            if outcome.error:
                raise SystemExit(f"{run.path}: could not be analyzed ({outcome.error})")
            loud = [f for f in outcome.findings if f.get("severity") in LOUD]
            named = run.slowed_rank is not None and any(
                f["analyzer"] == "straggler" and list(f.get("ranks") or []) == [run.slowed_rank] for f in loud)
            row = {"run": run.name, "half": half_of(run.name), "slowed_rank": run.slowed_rank,
                   "error": outcome.error, "named": named, "loud": bool(loud),
                   "loud_titles": [f"{f['analyzer']} {f['severity']} {f.get('ranks')}: {f['title']}" for f in loud],
                   **outcome.inspected}
            rows.append(row)
            if progress:
                print(f"  {run.name:22} {row['half']:8} named={named!s:5} loud={bool(loud)!s:5} "
                      f"compute x{row['compute_ratio']:.3f} work x{row['work_ratio']:.3f} last={row['last_arrival']} "
                      f"wall={row['wall_work']} compute={row['compute_test']}", file=sys.stderr, flush=True)
    return {"runs": rows, "tally": {half: _tally([r for r in rows if half == "all" or r["half"] == half])
                                    for half in ("tune", "held-out", "all")}}


def _tally(rows: list[dict[str, Any]]) -> dict[str, Any]:
    slowed = [r for r in rows if r["slowed_rank"] is not None]
    clean = [r for r in rows if r["slowed_rank"] is None]
    excess = [r["compute_ratio"] - 1 for r in slowed]
    clean_spread = [r["compute_ratio"] - 1 for r in clean]
    return {"excess_runs": len(slowed), "named": sum(r["named"] for r in slowed),
            "named_by": {test: sum(r[test] == [r["slowed_rank"]] for r in slowed)
                         for test in ("last_arrival", "wall_work", "compute_test")},
            "clean_runs": len(clean), "clean_loud": sum(r["loud"] for r in clean),
            "errors": [r["run"] for r in rows if r["error"]],
            "measured_compute_excess": [round(min(excess), 4), round(max(excess), 4)] if excess else None,
            "clean_top_compute_excess": round(max(clean_spread), 4) if clean_spread else None,
            "wall_work_excess": [round(min(r["work_ratio"] - 1 for r in slowed), 3),
                                 round(max(r["work_ratio"] - 1 for r in slowed), 3)] if slowed else None}


def render(result: dict[str, Any]) -> str:
    lines = []
    for half, t in result["tally"].items():
        lines.append(f"{half:8}: named {t['named']}/{t['excess_runs']} (last arrival {t['named_by']['last_arrival']}, "
                     f"wall work {t['named_by']['wall_work']}, compute {t['named_by']['compute_test']}); clean runs "
                     f"with a warning {t['clean_loud']}/{t['clean_runs']}; measured compute excess "
                     f"{t['measured_compute_excess']}, wall-clock work excess {t['wall_work_excess']}, clean top "
                     f"compute excess {t['clean_top_compute_excess']}" + (f"; errors {t['errors']}" if t["errors"] else ""))
    for r in result["runs"]:
        if r["loud"] and r["slowed_rank"] is None:
            lines.append(f"  false warning {r['run']}: {'; '.join(r['loud_titles'])}")
        if r["slowed_rank"] is not None and not r["named"]:
            lines.append(f"  missed {r['run']}: {'; '.join(r['loud_titles']) or 'no warning'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=CORPUS, help="corpus folder (with runs.json)")
    parser.add_argument("--json", type=Path, help="write every run's outcome and the tallies here")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-run progress on stderr")
    args = parser.parse_args(argv)
    result = measure(args.folder.resolve(), progress=not args.quiet)
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
