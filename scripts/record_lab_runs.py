"""Record the lab runs the test suite reads: real multi-node jobs over the namespace lab, one fault each.

Promise: `python scripts/record_lab_runs.py [NAME ...]` runs each named scenario of SCENARIOS (all by
default) on a fresh `netlab.Lab` (needs root), then keeps in `tests/fixtures/lab/<name>/` what the
tests need and nothing else: step files, environments, interface counters (`counters/*.net.jsonl`),
per-host manifests, the job's output under `perftracker run`, traces only where the scenario keeps them
(`KEEP_TRACES`); the run's manifest records what was done (`lab`: nodes, ranks per node, the fault and
its times, exit codes) as the tests' ground truth. Paths in the kept files are the fixture's own.
A run whose launchers did not behave as the scenario expects is reported and not kept.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from netlab import Lab, Scenario, node_names, run_scenario

from perftracker.rundir import write_manifest

FIXTURES = REPO / "tests" / "fixtures" / "lab"
SCENARIOS: dict[str, Scenario] = {
    # clean jobs: no network or straggler warning may come of them (clean-2 under `perftracker run` on each node)
    "clean-2": Scenario(nodes=2, collect="run", steps=24, profile_steps=12),
    "clean-3": Scenario(nodes=3, steps=30, profile_steps=12),
    # node-b's eth0 down for 3 s at step ~12; traces not kept (the live test checks the collective)
    "flap-3": Scenario(nodes=3, fault="flap", fault_step=12, steps=30, profile_steps=0),
    # node-b's egress held to 20 Mbit/s by tbf for the whole job
    "rate-3": Scenario(nodes=3, fault="rate", mbit=20.0, steps=16, profile_steps=6),
    # node-b's job (launcher and both ranks) held to 0.06 of a core from step 6 on (0.2 barely binds on a
    # loaded 2-core machine where each rank gets about that much anyway)
    "cpu-2": Scenario(nodes=2, fault="cpu", share=0.06, fault_step=6, steps=26, profile_steps=14),
    # node-b dies (every process of it killed, its `perftracker run` too) at step 10
    "kill-3": Scenario(nodes=3, collect="run", fault="kill", fault_step=10, steps=200, profile_steps=0),
}
KEEP = ("steps", "env", "counters", "manifests", "output", "errors", "manifest.json")
KEEP_TRACES = {"clean-2", "clean-3", "rate-3", "cpu-2"}


def _expected(name: str, codes: list[int | None]) -> bool:
    if name.startswith("kill"):
        return codes[1] is None or codes[1] != 0  # the killed node's launcher died with it
    return all(c == 0 for c in codes)


def _keep(name: str, run: Path, dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for entry in (*KEEP, *(("traces",) if name in KEEP_TRACES else ())):
        src = run / entry
        if src.is_dir():
            shutil.copytree(src, dest / entry)
        elif src.is_file():
            shutil.copy2(src, dest / entry)
    for path in dest.rglob("*"):  # the temporary run directory's path, as the fixture's own
        if path.is_file() and path.suffix in (".json", ".jsonl", ".log"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if str(run) in text:
                path.write_text(text.replace(str(run), f"tests/fixtures/lab/{name}"), encoding="utf-8")


def record(name: str) -> bool:
    sc = SCENARIOS[name]
    with tempfile.TemporaryDirectory(prefix=f"lab-{name}-") as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        with Lab(node_names(sc.nodes)) as lab:
            truth = run_scenario(lab, sc, run)
        codes = truth["launchers_exit"]
        print(f"{name}: launchers {codes}, attaches {truth.get('attaches_exit')}", flush=True)
        if not _expected(name, codes):
            for log in sorted((run / "lab-logs").glob("*.log")):
                print(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
            return False
        write_manifest(run, job=f"lab-{name}", lab={"scenario": name, **truth}, recorded_by="scripts/record_lab_runs.py")
        _keep(name, run, FIXTURES / name)
    size = sum(p.stat().st_size for p in (FIXTURES / name).rglob("*") if p.is_file())
    print(f"{name}: kept {size / 1e3:.0f} kB in {FIXTURES / name}", flush=True)
    return True


def main(argv: list[str]) -> int:
    why = Lab.available()
    if why:
        print(f"record_lab_runs: {why}", file=sys.stderr)
        return 2
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"record_lab_runs: unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}", file=sys.stderr)
        return 2
    failed = [n for n in names if not record(n)]
    print(json.dumps({"recorded": [n for n in names if n not in failed], "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
