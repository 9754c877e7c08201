#!/usr/bin/env python3
"""CPU of `perftracker analyze` on one real trace, two checkouts side by side in one run.

Each measurement is a fresh `python -m perftracker analyze TRACE -o OUT --no-cache` child whose CPU (user +
system of it and every process it started, from `wait4`) and wall time are recorded. Checkouts alternate
(A B, B A, A B, ...) so a change of load hits both alike; the table gives each one's median and minimum CPU
and the ratio of the medians. The findings.json of every run is compared to the first one's (their order and
titles), so a faster run that found something else is said.

    .venv/bin/python benchmarks/bench_analyze_cpu.py --code ../before . --repeat 5
    (default trace: ../shared/traces/hta/df_index_resolver/, the 53.7 MB HTA test trace)

Not run by CI. Results: printed, and written to benchmarks/results/bench_analyze_cpu.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver"


def _one_run(code: Path, trace: Path, out: Path) -> tuple[float, float, list[str]]:
    """(CPU s, wall s, the findings' titles) of one analyze of `trace` with perftracker from `code`."""
    env = dict(os.environ, PYTHONPATH=str(code))
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a pipe left unread while waiting could fill
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "perftracker", "analyze", str(trace), "-o", str(out),
                                 "--no-cache"], env=env, cwd=code, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
    if proc.returncode != 0:  # 2 is bad input, not findings (no --fail-on is given)
        sys.exit(f"analyze with {code} failed ({proc.returncode}): {stderr[-2000:]}")
    findings = json.loads((out / "findings.json").read_text(encoding="utf-8"))["findings"]
    return usage.ru_utime + usage.ru_stime, wall, [str(f.get("title", "")) for f in findings]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", nargs=2, type=Path, required=True, metavar=("BEFORE", "AFTER"),
                        help="two checkouts (each a folder holding the perftracker package)")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="a trace file or folder")
    parser.add_argument("--repeat", type=int, default=5, help="runs per checkout (default 5)")
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"{args.trace}: no such trace; pass --trace (e.g. HTA's tests/data/df_index_resolver/)")
    codes = [path.resolve() for path in args.code]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # no run writes bytecode: a checkout that has some skips compiling
        for code in codes:
            if next((code / "perftracker").rglob("__pycache__"), None) is not None:
                print(f"warning: {code} holds __pycache__ folders (bytecode the other side may compile each run); "
                      "compare clean checkouts (e.g. `git archive HEAD perftracker | tar -x -C DIR`)", flush=True)
    cpu: dict[Path, list[float]] = {code: [] for code in codes}
    wall: dict[Path, list[float]] = {code: [] for code in codes}
    titles: dict[Path, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-analyze-") as tmp:
        for i in range(args.repeat):
            for code in (codes if i % 2 == 0 else codes[::-1]):
                seconds, elapsed, found = _one_run(code, args.trace, Path(tmp) / f"out-{i}-{len(cpu[code])}")
                cpu[code].append(seconds)
                wall[code].append(elapsed)
                titles.setdefault(code, found)
                print(f"{code.name:>12}  cpu {seconds:6.2f} s  wall {elapsed:6.2f} s  load {os.getloadavg()[0]:.1f}",
                      flush=True)
    before, after = codes
    rows = {str(code): {"cpu_s": cpu[code], "wall_s": wall[code], "median_cpu_s": statistics.median(cpu[code]),
                        "min_cpu_s": min(cpu[code])} for code in codes}
    ratio = statistics.median(cpu[after]) / statistics.median(cpu[before])
    print(f"\nmedian CPU: before {statistics.median(cpu[before]):.2f} s, after {statistics.median(cpu[after]):.2f} s "
          f"(after/before {ratio:.3f}); min {min(cpu[before]):.2f} / {min(cpu[after]):.2f} s")
    if titles[before] != titles[after]:
        print(f"findings differ:\n before: {titles[before]}\n after:  {titles[after]}")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "bench_analyze_cpu.json").write_text(json.dumps(
        {"trace": str(args.trace), "runs": rows, "after_over_before": ratio,
         "same_findings": titles[before] == titles[after]}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
