"""Regenerate the committed sample run directory from a real 4-rank torchrun job (needs torch).

Promise: ``python scripts/make_sample_traces.py [OUT]`` runs ``scripts/sample_job.py`` under
torchrun on CPU (gloo, 4 ranks, rank 2 slowed by real extra forward compute), into ``OUT``
(default ``sample_traces/ddp-gloo-4rank-slow-rank2``, replaced if it is a previous run directory),
writes its manifest, fails loudly (exit 1 or an exception, and the partial directory removed) if
the job fails or the run directory is 3 MB or more, and prints a summary: files, sizes, and per-rank median step and phase times.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_job_runner import REPO, run_job

from perftracker.rundir import read_manifest

DEFAULT_OUT = REPO / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
MAX_BYTES = 3 * 1024 * 1024
PHASES = ("data", "forward", "backward", "optimizer")


def dir_size(path: Path) -> int:
    """Total bytes of the regular files under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def step_stats(run_dir: Path, skip: int = 3) -> dict[int, dict[str, float]]:
    """Per rank: median step time and median phase times in ms, ignoring the first `skip` steps."""
    stats: dict[int, dict[str, float]] = {}
    for path in sorted((run_dir / "steps").glob("rank-*.jsonl")):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        records = records[skip:] or records
        rank = int(records[0]["rank"])
        row = {"step": statistics.median((r["end_ns"] - r["start_ns"]) / 1e6 for r in records)}
        for phase in PHASES:
            row[phase] = statistics.median(r["phases_ns"].get(phase, 0) / 1e6 for r in records)
        stats[rank] = row
    return stats


def format_stats(stats: dict[int, dict[str, float]], slow_rank: int) -> str:
    header = f"{'rank':>6} {'step ms':>8} " + " ".join(f"{p + ' ms':>12}" for p in PHASES)
    lines = [header]
    for rank, row in sorted(stats.items()):
        mark = " (slowed)" if rank == slow_rank else ""
        cells = " ".join(f"{row[p]:>12.2f}" for p in PHASES)
        lines.append(f"{rank:>6} {row['step']:>8.2f} {cells}{mark}")
    return "\n".join(lines)


def _is_previous_run(path: Path) -> bool:
    manifest = read_manifest(path)
    return manifest is not None and manifest.get("format") == "perftracker-run"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="run directory to write")
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--slow-rank", type=int, default=2)
    parser.add_argument("--slow-factor", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    out: Path = args.out.resolve()
    if out.exists() and any(out.iterdir()) and not _is_previous_run(out):
        print(f"error: {out} exists and is not a perftracker run directory; not touching it", file=sys.stderr)
        return 1
    # Written in place (the traces record their export path): a failure removes the partial
    # directory; the previous sample is still in git.
    if out.exists():
        shutil.rmtree(out)
    ok = False
    try:
        run_job(
            out,
            nproc=args.nproc,
            steps=args.steps,
            profile_steps=args.profile_steps,
            slow_rank=args.slow_rank,
            slow_factor=args.slow_factor,
            timeout=args.timeout,
            job_name=out.name,
            manifest_extra={"generated_by": "python scripts/make_sample_traces.py"},
            shown_run_dir=_shown(out),
        )
        for path in out.rglob("*"):  # atomic writes make 0600 files; these are meant to be shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        size = dir_size(out)
        if size >= MAX_BYTES:
            print(
                f"error: run directory is {size / 1e6:.2f} MB, over the {MAX_BYTES / 1e6:.2f} MB limit; "
                "use fewer --profile-steps or --steps",
                file=sys.stderr,
            )
            return 1
        ok = True
    finally:
        if not ok:
            shutil.rmtree(out, ignore_errors=True)

    manifest: dict[str, Any] = read_manifest(out) or {}
    print(f"wrote {out} ({dir_size(out) / 1e6:.3f} MB, job ran {manifest.get('job_wall_s')} s)")
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        print(f"  {path.relative_to(out)}  {path.stat().st_size:>9,} B")
    print(f"command: {manifest.get('command')}")
    print(f"slowdown: {json.dumps(manifest.get('slowdown'))}")
    print(format_stats(step_stats(out), args.slow_rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
