"""What perftracker says about real multi-node jobs recorded on the namespace lab (`scripts/record_lab_runs.py`):
clean jobs give no network or straggler warning; a link flap, a rate-limited node, a CPU-limited node and a
dead node are each named as the node, with what the job felt; traces of several hosts with skewed clocks are
aligned per host.

Each fixture is a real run (3 or 2 nodes in their own network, PID and UTS namespaces, 2 ranks each, gloo over
a bridge, `perftracker attach` or `perftracker run` on every node); its manifest's `lab` entry is what was
done to it, the truth these tests compare with.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from api_helpers import analyzed

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.stragglers.straggler import arrivals_view
from perftracker.collectors.loading import LoadOptions, load_path

LAB = Path(__file__).resolve().parents[1] / "fixtures" / "lab"
NETWORK_OR_STRAGGLER = ("links", "straggler", "silent_host")


@cache
def _analyzed(name: str) -> tuple[tuple[Finding, ...], dict[str, Any]]:
    out = Path(f"/tmp/perftracker-lab-fixture-{name}")
    shutil.rmtree(out, ignore_errors=True)
    analysis = analyzed(LAB / name, out, cache=False, workers=1)
    shutil.rmtree(out, ignore_errors=True)
    return tuple(analysis.findings), analysis.document


def findings(name: str) -> list[Finding]:
    return list(_analyzed(name)[0])


def truth(name: str) -> dict[str, Any]:
    lab: dict[str, Any] = json.loads((LAB / name / "manifest.json").read_text())["lab"]
    return lab


def serious(name: str, *analyzers: str) -> list[Finding]:
    return [f for f in findings(name) if f.severity >= Severity.WARNING and (not analyzers or f.analyzer in analyzers)]


def test_a_clean_two_node_job_under_run_samples_every_node_and_warns_of_nothing() -> None:
    # GIVEN a clean job on node-a and node-b (2 ranks each), each node's launcher under `perftracker run`
    run = LAB / "clean-2"
    assert truth("clean-2")["launchers_exit"] == [0, 0]
    # THEN each node's run saw only its own ranks, under its own hostname
    manifests = {p.stem: json.loads(p.read_text()) for p in (run / "manifests").glob("*.json")}
    assert {h: m["ranks"] for h, m in manifests.items()} == {"node-a": [0, 1], "node-b": [2, 3]}
    # AND sampled its eth0 about every second, chosen because of GLOO_SOCKET_IFNAME and the route to its peer
    for host, peer in (("node-a", "10.77.0.2"), ("node-b", "10.77.0.1")):
        lines = [json.loads(line) for line in (run / "counters" / f"{host}.net.jsonl").read_text().splitlines()]
        samples = [r for r in lines if "changed_within_s" not in r]
        gaps = [(b["ts_ns"] - a["ts_ns"]) / 1e9 for a, b in zip(samples, samples[1:])]
        assert len(samples) >= 5 and 0.8 < statistics.median(gaps) < 1.6, gaps
        assert list(samples[-1]["ifaces"]) == ["eth0"]
        assert samples[-1]["ifaces"]["eth0"]["why"] == f"GLOO_SOCKET_IFNAME=eth0; route to {peer}"
    # AND no network or straggler warning comes of its analysis
    assert serious("clean-2", *NETWORK_OR_STRAGGLER) == []
    assert [f.hosts for f in findings("clean-2") if f.analyzer == "links"] == [("node-a", "node-b")]


def test_a_clean_three_node_job_gives_no_network_or_straggler_warning() -> None:
    # GIVEN a clean 3-node job (6 ranks, attach on every node) WHEN analyzed
    # THEN nothing about the network or a straggler is raised, and the Ethernet network was judged
    assert serious("clean-3", *NETWORK_OR_STRAGGLER) == []
    judged = {a["area"]: a["from"] for a in _analyzed("clean-3")[1]["summary"]["coverage"]["judged"]}
    assert judged["Ethernet network"] == ["interface counters"]
    summary = [f for f in findings("clean-3") if f.analyzer == "links"]
    assert len(summary) == 1 and summary[0].hosts == ("node-a", "node-b", "node-c")
    assert all(link["why"].startswith("GLOO_SOCKET_IFNAME=eth0; route to 10.77.0.")
               for link in summary[0].evidence["links"])


def test_a_link_flap_is_named_with_the_node_interface_time_and_stall() -> None:
    # GIVEN node-b's eth0 taken down for 3 s mid-run (every rank waits for it) WHEN analyzed
    fault = truth("flap-3")["fault"]
    found = serious("flap-3", *NETWORK_OR_STRAGGLER)
    # THEN one critical finding names node-b's eth0, when it went down and for how long (to the watcher's 0.1 s)
    assert [(f.analyzer, f.severity, f.hosts) for f in found] == [("links", Severity.CRITICAL, ("node-b",))]
    flap = found[0]
    (down,) = flap.evidence["downs"]
    assert flap.evidence["iface"] == "eth0" and down["taken_down"] is True
    # (within 0.25 s, beyond half the time the `ip link set` call took: the kernel changed it during the call)
    assert abs(down["start_ns"] - fault["down_ns"]) < 0.25e9 + fault["down_call_ns"] / 2
    assert abs(down["end_ns"] - fault["up_ns"]) < 0.25e9 + fault["up_call_ns"] / 2
    assert f"went down for {(fault['up_ns'] - fault['down_ns']) / 1e9:.1f} s at " in flap.title
    # AND the stall it caused: every rank, about as long as the link was down, at one step
    stall = down["stall"]
    assert stall["ranks"] == [0, 1, 2, 3, 4, 5] and 2.5 < stall["seconds"] < 5.0
    assert f"every rank stalled {stall['seconds']:.1f} s" in flap.title and f"at step {stall['step']}" in flap.title
    # AND the two other nodes are the ones that only saw it
    assert sorted(s["host"] for s in flap.evidence["also_saw"]) == ["node-a", "node-c"]


def test_a_rate_limited_node_is_named_as_the_node() -> None:
    # GIVEN node-b's egress held to 20 Mbit/s by tbf for the whole job WHEN analyzed
    found = serious("rate-3", *NETWORK_OR_STRAGGLER)
    # THEN one warning names node-b's link as held to its shaper's rate, with the job waiting in all_reduce
    assert [(f.analyzer, f.hosts) for f in found] == [("links", ("node-b",))]
    ev = found[0].evidence
    assert ev["check"] == "rate" and ev["shaper_mbps"] == truth("rate-3")["fault"]["mbit"]
    assert ev["overlimits_per_s"] > 100 and ev["collective"] == "all_reduce" and ev["comm_share"] > 0.5


def test_a_cpu_limited_node_is_named_as_the_node_not_as_its_ranks_one_by_one() -> None:
    # GIVEN node-b's job held to a sliver of a core from step 6 on (2 nodes, 2 ranks each) WHEN analyzed
    found = serious("cpu-2")
    # THEN the straggler is host node-b (its ranks 2 and 3 together), and the slowdown is on host node-b
    host = [f for f in found if f.analyzer == "straggler"]
    assert len(host) == 1 and host[0].title.startswith("Host node-b is slow: its ranks 2, 3 arrive late together")
    assert host[0].evidence["whole_host"] is True
    slower = [f for f in found if f.analyzer == "degradation"]
    assert len(slower) == 1 and " on host node-b (ranks 2, 3)" in slower[0].title
    # AND no warning names one of its ranks alone, and nothing blames the network
    assert not [f for f in found if len(f.ranks) == 1] and not serious("cpu-2", "links")


def test_a_dead_node_is_named_and_its_samples_until_it_died_are_kept() -> None:
    # GIVEN node-b killed (every process of it, its `perftracker run` too) at step 10 WHEN analyzed
    killed = truth("kill-3")["fault"]["killed_ns"]
    found = serious("kill-3", "silent_host")
    # THEN node-b is named as the node that went away, its ranks silent, the others' errors naming its address
    assert len(found) == 1 and found[0].hosts == ("node-b",) and found[0].ranks == (2, 3)
    assert "none of them reported an error of its own" in found[0].title and "10.77.0.2" in found[0].title
    # AND its interface samples reach the moment it died (each was on disk as it was taken)
    last = [json.loads(line)["ts_ns"] for line in (LAB / "kill-3" / "counters" / "node-b.net.jsonl").open()][-1]
    assert killed - 1.5e9 < last <= killed
    # AND a survivor's lost-connection error is not claimed as a first failure of its own: it is folded into the
    # dead node's finding as a consequence (one cause, one finding)
    assert not [f for f in findings("kill-3") if f.analyzer == "crash"]
    folded = found[0].evidence["folded"]
    assert [f["analyzer"] for f in folded] == ["crash"] and "about a lost peer" in folded[0]["title"]


def _shift_host(run: Path, host: str, shift_us: float) -> None:
    """Move every event of `host`'s traces by `shift_us`: what a node whose clock is off by that much writes."""
    for path in (run / "traces").glob("*.json.gz"):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        if doc.get("host_name") != host:
            continue
        for ev in doc["traceEvents"]:
            if isinstance(ev.get("ts"), (int, float)):
                ev["ts"] += shift_us
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.parametrize("skew_ms", [{"node-b": 40.0, "node-c": -25.0}])
def test_traces_of_several_hosts_with_skewed_clocks_are_aligned_per_host(tmp_path: Path,
                                                                        skew_ms: dict[str, float]) -> None:
    # GIVEN the clean 3-node job's traces (the lab's nodes share one clock), then the same traces with node-b's
    # clock 40 ms ahead and node-c's 25 ms behind
    run = tmp_path / "run"
    shutil.copytree(LAB / "clean-3" / "traces", run / "traces")
    options = LoadOptions(workers=1, cache_dir=None)
    before = Analysis(load_path(run, options)).view(arrivals_view).offsets
    for host, ms in skew_ms.items():
        _shift_host(run, host, ms * 1e3)
    # WHEN the clocks are aligned again
    store = load_path(run, options)
    after = Analysis(store).view(arrivals_view).offsets
    # THEN each host's estimated offset, against node-a's, moved by its skew (to 0.1 ms)
    hosts = {int(r): str(h) for r, h in zip(store.ranks["rank"], store.ranks["host"])}
    ref = min(r for r, h in hosts.items() if h == "node-a")
    for rank, host in hosts.items():
        moved_ms = ((float(after[rank]) - float(after[ref])) - (float(before[rank]) - float(before[ref]))) / 1e6
        assert abs(moved_ms - skew_ms.get(host, 0.0)) < 0.1, (rank, host, moved_ms)
    # AND the analysis of the skewed traces runs to the end without any analyzer failing
    out = analyzed(run, tmp_path / "out", workers=1, cache=False).findings
    assert not [f for f in out if f.title.startswith("Analyzer '")]
