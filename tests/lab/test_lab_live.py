"""Real multi-node jobs on the namespace lab, collected as a user would: `perftracker run` on every node of a
clean 2-node job, `perftracker attach` on every node of a 3-node job whose node-b loses its link for 3 s.

Each node is a network + PID + UTS + mount namespace with its own hostname and address, joined to the others
by a bridge in a "switch" namespace; each perftracker process sees only its node's processes and interfaces,
and all write into one shared run directory. (The other faults, and a clean 3-node job, are recorded runs:
tests/lab/test_lab_fixtures.py, so that CI runs only these two jobs.)
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from netlab import REPO, Lab, Scenario, run_scenario, sweep_stale

from perftracker.analyzers.findings import Finding, Severity
from perftracker.collectors.loading import LoadOptions
from perftracker.pipeline import analyze_path

NETWORK_OR_STRAGGLER = ("links", "straggler", "silent_host")


def _analyze(run: Path, out: Path) -> list[Finding]:
    return analyze_path(run, out, LoadOptions(workers=1, cache_dir=None)).findings


def _full_samples(path: Path) -> list[dict[str, object]]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if "changed_within_s" not in r]


@pytest.mark.slow
def test_clean_two_node_job_under_run_samples_every_node_and_warns_of_nothing(lab: Lab, tmp_path: Path) -> None:
    # GIVEN a clean job on node-a and node-b (2 ranks each), each node's launcher under `perftracker run`
    run = tmp_path / "run"
    truth = run_scenario(lab, Scenario(nodes=2, collect="run", steps=24, profile_steps=12), run, port=29411)
    assert truth["launchers_exit"] == [0, 0], truth
    # THEN each node's run saw only its own ranks, under its own hostname
    manifests = {p.stem: json.loads(p.read_text()) for p in (run / "manifests").glob("*.json")}
    assert {h: m["ranks"] for h, m in manifests.items()} == {"node-a": [0, 1], "node-b": [2, 3]}
    # AND sampled its eth0 about every second, chosen because of GLOO_SOCKET_IFNAME and the route to its peer
    for host, peer in (("node-a", "10.77.0.2"), ("node-b", "10.77.0.1")):
        samples = _full_samples(run / "counters" / f"{host}.net.jsonl")
        gaps = [(int(b["ts_ns"]) - int(a["ts_ns"])) / 1e9 for a, b in zip(samples, samples[1:])]  # type: ignore[call-overload]
        assert len(samples) >= 5 and 0.8 < statistics.median(gaps) < 1.6, gaps
        eth0 = samples[-1]["ifaces"]["eth0"]  # type: ignore[index]
        assert eth0["why"] == f"GLOO_SOCKET_IFNAME=eth0; route to {peer}" and list(samples[-1]["ifaces"]) == ["eth0"]  # type: ignore[index,call-overload]
    # WHEN the shared run directory is analyzed THEN no network or straggler warning comes of it
    found = _analyze(run, tmp_path / "out")
    assert [f.title for f in found if f.analyzer in NETWORK_OR_STRAGGLER and f.severity >= Severity.WARNING] == []
    assert any(f.analyzer == "links" and f.hosts == ("node-a", "node-b") for f in found)


@pytest.mark.slow
def test_link_flap_on_one_of_three_nodes_is_named_with_node_interface_time_and_the_stall(lab: Lab,
                                                                                       tmp_path: Path) -> None:
    # GIVEN a 3-node job (2 ranks each, attach on every node, the profiler on steps 10-21) whose node-b's eth0
    # goes down for 3 s once rank 0 has done 12 steps
    run = tmp_path / "run"
    sc = Scenario(nodes=3, fault="flap", fault_step=12, down_s=3.0, steps=30, profile_steps=12, profile_skip=8)
    truth = run_scenario(lab, sc, run, port=29412)
    assert truth["launchers_exit"] == [0, 0, 0] and truth["attaches_exit"] == [0, 0, 0], truth
    # WHEN the shared run directory is analyzed
    found = [f for f in _analyze(run, tmp_path / "out")
             if f.analyzer in NETWORK_OR_STRAGGLER and f.severity >= Severity.WARNING]
    # THEN one critical finding names node-b's eth0, when it went down, for how long, and the stall in all_reduce
    assert [(f.analyzer, f.severity, f.hosts) for f in found] == [("links", Severity.CRITICAL, ("node-b",))], [
        f.title for f in found]
    (down,) = found[0].evidence["downs"]
    fault = truth["fault"]
    # (within 0.25 s, beyond half the time the `ip link set` call took: the kernel changed it during the call)
    assert abs(down["start_ns"] - fault["down_ns"]) < 0.25e9 + fault["down_call_ns"] / 2
    assert abs(down["end_ns"] - fault["up_ns"]) < 0.25e9 + fault["up_call_ns"] / 2
    assert down["stall"]["ranks"] == [0, 1, 2, 3, 4, 5] and down["stall"]["collective"] == "all_reduce"
    assert f"in all_reduce at step {down['stall']['step']}" in found[0].title
    # AND the nodes that only saw the loss are named as such
    assert sorted(s["host"] for s in found[0].evidence["also_saw"]) == ["node-a", "node-c"]


def test_a_lab_whose_owner_was_killed_is_swept_by_the_next(tmp_path: Path) -> None:
    # GIVEN a lab (2 nodes, a CPU quota on one) built by a process that is then killed with SIGKILL
    why = Lab.available()
    if why:
        pytest.skip(why)
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO / "scripts")})
    assert owner.stdout is not None
    tag = owner.stdout.readline().strip()
    assert tag.startswith("ptlab-"), tag
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    left = [ns for ns in _namespaces() if ns.startswith(tag)]
    assert len(left) == 3  # nothing cleaned up: it had no chance
    # WHEN stale labs are swept (every new Lab does so first)
    removed = sweep_stale()
    # THEN its namespaces, their /etc/netns files and its cgroup are gone
    assert not [ns for ns in _namespaces() if ns.startswith(tag)]
    assert not list(Path("/etc/netns").glob(f"{tag}*")) and any(tag in r for r in removed)
    assert not [g for root in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/unified")) for g in root.glob(f"{tag}*")]


OWNER = """
import contextlib, sys, time
from netlab import Lab
lab = Lab(["node-a", "node-b"]).__enter__()
quota = lab.cpu_quota(lab.nodes[1], 0.5)
quota.__enter__()
print(lab.tag, flush=True)
time.sleep(60)
"""


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]
