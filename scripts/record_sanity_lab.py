"""Record `perftracker sanity` runs on the namespace lab as fixtures (tests/fixtures/sanity_lab/<case>.json).

Each case is a real 3-node job (one rank per node, gloo over the lab's bridge), launched as a user would:
`torchrun --nnodes 3 --node_rank i --master_addr <node-a> -m perftracker sanity -o OUT --quick` on each node.
The fixture is rank 0's OUT/sanity.json plus a `lab` entry: the fault done (the truth the tests compare with),
the wall time, the exit codes and the machine's load average. Cases:

  clean   nothing done       (each case --repeat N times: <case>-1 ... <case>-N, from --first)
  rate    node-b's egress held to --mbit Mbit/s by tc tbf from the start
  cpu     node-b's processes held to --share of one core by a cgroup once node-b has joined
  kill    node-b killed (its PID namespace's init, so every process of it) --kill-after s after it joined
  kill0   node-a killed the same way: rank 0's node, and the rendezvous store's (a lower rank writes instead)
  intra   node-b's loopback (its own ranks' traffic, --nproc 2 or more) held to --mbit by tc netem from the start

wall_s is from the launch to the writer's last file (findings.json; interpreter and torch start included);
the records' elapsed_s count from the moment every rank joined (the time box); `ended_after_join_s` is, per
node, when its torchrun launcher exited, counted from node-b's `joined` line (the agents are released when the
check ends). `--hog N` runs N busy processes beside the lab (outside it) for the whole run, as a loaded
machine has. The `lab` entry also keeps the output folder's exclude.txt and findings.json's summary.exclude
(they must be equal) and every `perftracker` line the nodes printed.

    sudo PYTHONPATH=$PWD .venv/bin/python scripts/record_sanity_lab.py clean rate cpu --repeat 10 --hog 1

Needs root, iproute2 and util-linux (scripts/netlab.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netlab import IFACE, REPO, Lab, _python_env, node_names  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "sanity_lab"


def _wait_line(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.is_file() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"no {text!r} in {log} within {timeout:.0f} s")


def _wait_file(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            return True
        time.sleep(0.1)
    return False


def run_case(lab: Lab, case: str, out: Path, time_box: float, mbit: float, share: float, kill_after: float,
             port: int, nproc: int = 1, hog: int = 0) -> dict[str, Any]:
    """One sanity job on the lab with `case`'s fault; rank 0's results with the lab's truth."""
    nodes = lab.nodes
    bad = lab.node("node-a" if case == "kill0" else "node-b")
    logs = out / "logs"
    env = _python_env({"GLOO_SOCKET_IFNAME": IFACE})
    launchers = []
    fault: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if case == "rate":
        fault = lab.rate_limit(bad, mbit)
    elif case == "intra":
        fault = lab.loopback_rate(bad, mbit)
    started = time.monotonic()
    with fault:
        for i, node in enumerate(nodes):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(nodes)), "--node_rank", str(i),
                   "--nproc_per_node", str(nproc), "--max_restarts", "0", "--master_addr", nodes[0].address,
                   "--master_port", str(port), "-m", "perftracker", "sanity", "-o", str(out / "result"),
                   "--time-box", f"{time_box:g}"]
            launchers.append(node.popen(cmd, env=env, log=logs / f"{node.name}.log"))
        _wait_line(logs / "node-b.log", "joined", timeout=time_box + 120)  # faults hit the measurement, not the start
        fault_at = time.monotonic() - started
        quota: contextlib.AbstractContextManager[Any] = (lab.cpu_quota(bad, share) if case == "cpu"
                                                         else contextlib.nullcontext())
        with quota:
            if case in ("kill", "kill0"):
                killer = threading.Timer(kill_after, lab.kill, args=(bad,))
                killer.start()
            done = _wait_file(out / "result" / "findings.json", timeout=time_box + 120)
            wall = time.monotonic() - started
    ended: list[float | None] = [None] * len(launchers)
    limit = time.monotonic() + 1.25 * time_box + 30
    while time.monotonic() < limit and any(e is None for e in ended):
        for i, proc in enumerate(launchers):
            if ended[i] is None and proc.poll() is not None:
                ended[i] = round(time.monotonic() - started - fault_at, 2)
        time.sleep(0.1)
    codes = [proc.poll() for proc in launchers]
    for proc in launchers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
    results_file = out / "result" / "sanity.json"
    if not results_file.is_file():
        raise RuntimeError(f"{case}: no rank wrote sanity.json; logs in {logs}")
    doc = json.loads(results_file.read_text())
    summary = json.loads((out / "result" / "findings.json").read_text())["summary"] if done else {}
    said = [line.strip()[:300] for node in nodes for line in (logs / f"{node.name}.log").read_text(
        errors="replace").splitlines() if "perftracker" in line and "joined" not in line][:40]
    doc["lab"] = {"case": case, "fault_node": bad.name if case != "clean" else "",
                  "mbit": mbit if case in ("rate", "intra") else None,
                  "share": share if case == "cpu" else None, "kill_after_s": kill_after if case == "kill" else None,
                  "wall_s": round(wall, 2), "fault_at_s": round(fault_at, 2), "wrote": done, "exit_codes": codes, "loadavg": list(os.getloadavg()),
                  "time_box_s": time_box, "nodes": [n.name for n in nodes], "ranks_per_node": nproc,
                  "ended_after_join_s": ended, "hog": hog,
                  "exclude_txt": (out / "result" / "exclude.txt").read_text().split() if done else None,
                  "summary_exclude": summary.get("exclude"), "said": said}
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="+", choices=["clean", "rate", "cpu", "kill", "kill0", "intra"])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case to record")
    parser.add_argument("--time-box", type=float, default=20.0)
    parser.add_argument("--mbit", type=float, default=20.0)
    parser.add_argument("--share", type=float, default=0.2)
    parser.add_argument("--hog", type=int, default=0, help="busy processes beside the lab (a loaded machine)")
    parser.add_argument("--first", type=int, default=1, help="number of the first clean run (clean-N)")
    parser.add_argument("--kill-after", type=float, default=1.5)
    parser.add_argument("--nproc", type=int, default=1, help="ranks per node")
    parser.add_argument("--fixtures", type=Path, default=OUT)
    parser.add_argument("--work", type=Path, default=Path("/tmp/perftracker-sanity-lab"))
    args = parser.parse_args(argv)
    why = Lab.available()
    if why:
        print(f"record_sanity_lab: {why}", file=sys.stderr)
        return 2
    args.fixtures.mkdir(parents=True, exist_ok=True)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    try:
        return _record(args)
    finally:
        for hog in hogs:
            hog.kill()


def _record(args: argparse.Namespace) -> int:
    with Lab(node_names(3)) as lab:
        for case in args.cases:
            for n in range(args.repeat):
                name = f"{case}-{n + args.first}"
                work = args.work / name
                try:
                    doc = run_case(lab, case, work, args.time_box, args.mbit, args.share, args.kill_after,
                                   port=random.randint(20000, 60000), nproc=args.nproc, hog=args.hog)
                except RuntimeError as exc:  # a run that wrote nothing is a result too: said, not hidden
                    print(f"{name}: FAILED: {exc}", flush=True)
                    continue
                (args.fixtures / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
                print(f"{name}: wall {doc['lab']['wall_s']} s, exit {doc['lab']['exit_codes']}, "
                      f"load {doc['lab']['loadavg'][0]:.1f}", flush=True)
                if case in ("kill", "kill0"):  # the dead node cannot come back: the lab is done
                    return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
