"""RoCE flow control: `ethtool -S` parsing, the live sampler's ethtool field, the rdma_pfc analyzer on PFC
pauses / storms / drops, offline `ethtool -S` dumps, and the root-cause chain to a communication straggler."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from api_helpers import analyzed

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.health.rdma_pfc import analyze_rdma_pfc, pfc_series
from perftracker.analyzers.rootcause import link_findings
from perftracker.collectors.counters.ethtool import flow_control, parse_ethtool_stats, read_ethtool
from perftracker.collectors.counters.inputs import load_counter_inputs
from perftracker.live.attach.discovery import Job
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.rdma_sampler import RdmaSampler
from perftracker.store.schema import conform

from .conftest import ETHTOOL_FIXTURE, FakeEthtool, FakeRdmaNode, counter_store

TICK_S = 10.0
US_PER_TICK = int(TICK_S * 1e6)



def _sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_tick: dict[str, dict[str, int]], ticks: int = 5,
            host: str = "node-r", eth: FakeEthtool | None = None) -> tuple[Path, RdmaSampler, LiveContext]:
    """Run the live sampler on a 2-port RoCE node (mlx5_0/eth0, mlx5_1/eth1) whose ethtool counters advance by
    `per_tick[netdev]` every 10 s of fake time; returns the written rdma.jsonl."""
    node = FakeRdmaNode(tmp_path / "sys", host, devices=("mlx5_0", "mlx5_1"), rate="200 Gb/sec (4X HDR)",
                        link_layer="Ethernet", netdev="eth")
    eth = eth or FakeEthtool(["eth0", "eth1"])
    monkeypatch.setattr(time, "time_ns", lambda: node.now_ns)  # snapshot() stamps records with time.time_ns()
    ctx = LiveContext(run_dir=tmp_path / "run", job=Job([]), host=host, sysfs_root=tmp_path / "sys")
    sampler = RdmaSampler(ethtool_reader=eth)
    sampler.start(ctx)
    sampler.sample(ctx)
    for _ in range(ticks):
        node.tick(TICK_S, gbps=150.0)
        for netdev, inc in per_tick.items():
            eth.add(netdev, **inc)
        sampler.sample(ctx)
    return ctx.run_dir / "counters" / f"{host}.rdma.jsonl", sampler, ctx


def _pfc(path: Path) -> list[Finding]:
    return analyze_rdma_pfc(Analysis(counter_store([path])))


def test_parse_ethtool_output_and_select_flow_control_counters() -> None:
    # GIVEN a ConnectX (mlx5) `ethtool -S` output with hundreds of per-ring / per-channel counters
    text = ETHTOOL_FIXTURE.read_text() + "     weird_hex: 0x1f\n     not_a_number: n/a\n     half: 1.5\n" \
        "     evil: __import__('os').system('false')\n"
    # WHEN it is parsed and the flow-control counters are selected
    stats = parse_ethtool_stats(text)
    selected = flow_control(stats)
    # THEN every integer counter is read, non-integers are skipped, and the selection keeps the port-level
    # pause / PFC / discard / buffer / ECN / storm counters and none of the per-queue ones
    assert len(stats) > 700 and stats["rx_prio3_pause_duration"] == 91234567 and stats["ch3_poll"] > 0
    assert not {"weird_hex", "not_a_number", "half", "evil"} & set(stats)
    for name in ("rx_prio3_pause", "rx_prio3_pause_duration", "rx_prio3_pause_transition", "tx_prio3_pause",
                 "tx_prio3_pause_duration", "rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_discards_phy",
                 "tx_discards_phy", "rx_out_of_buffer", "rx_prio3_buf_discard", "rx_prio3_cong_discard",
                 "tx_pause_storm_warning_events", "tx_pause_storm_error_events", "rx_ecn_mark", "rx_prio3_marked"):
        assert name in selected, name
    assert not [n for n in selected if n.startswith(("rx0_", "rx7_", "tx3_", "ch0_"))]
    assert "tx_prio3_packets" not in selected and "rx_packets_phy" not in selected and len(selected) < 60


def test_read_ethtool_runs_the_command_and_never_raises(tmp_path: Path) -> None:
    # GIVEN fake ethtool programs: one printing the fixture, one failing, one hanging
    def prog(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
        return str(path)

    good = prog("good", f'[ "$1" = "-S" ] && [ "$2" = "eth1" ] && cat {ETHTOOL_FIXTURE}')
    # WHEN each is run the way the sampler runs ethtool
    # THEN the counters come back, and a missing program, an unknown device, a hang or an option-like
    # device name give None
    assert read_ethtool("eth1", ethtool=good)["tx_prio3_pause"] == 10422  # type: ignore[index]
    assert read_ethtool("eth9", ethtool=good) is None
    assert read_ethtool("eth1", ethtool=str(tmp_path / "missing")) is None
    assert read_ethtool("eth1", ethtool=prog("bad", "echo 'no stats available' >&2; exit 95")) is None
    assert read_ethtool("eth1", ethtool=prog("slow", "sleep 5"), timeout_s=0.2) is None
    assert read_ethtool("--help", ethtool=good) is None and read_ethtool("../x", ethtool=good) is None


def test_live_sampler_adds_ethtool_counters_of_roce_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a RoCE node whose eth1 (mlx5_1) receives PFC pauses on priority 3, eth0 quiet
    pause = {"rx_prio3_pause": 4000, "rx_prio3_pause_duration": US_PER_TICK // 5, "rx_prio3_pause_transition": 2000}
    # WHEN the live RDMA sampler samples it 6 times
    path, sampler, ctx = _sample(tmp_path, monkeypatch, {"eth1": pause})
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    # THEN every record carries only the selected flow-control counters of its own netdev, advancing on eth1
    assert len(recs) == 12 and all("ethtool" in r for r in recs)
    assert all(len(r["ethtool"]) < 60 and "rx0_packets" not in r["ethtool"] for r in recs)
    dur = [r["ethtool"]["rx_prio3_pause_duration"] for r in recs if r["device"] == "mlx5_1"]
    assert dur == [91234567 + i * US_PER_TICK // 5 for i in range(6)]
    assert {r["ethtool"]["rx_prio3_pause_duration"] for r in recs if r["device"] == "mlx5_0"} == {91234567}
    assert sampler.status().startswith("2 port(s), PFC counters of 2") and ctx.notes == []


def test_sampler_without_ethtool_says_how_to_get_pfc_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a RoCE node on a host without the ethtool program
    monkeypatch.setattr("perftracker.live.samplers.rdma_sampler.shutil.which", lambda name: None)
    node = FakeRdmaNode(tmp_path / "sys", "h", devices=("mlx5_0",), link_layer="Ethernet", netdev="eth")
    ctx = LiveContext(run_dir=tmp_path / "run", job=Job([]), host="h", sysfs_root=tmp_path / "sys")
    sampler = RdmaSampler()
    # WHEN it samples
    sampler.start(ctx)
    sampler.sample(ctx)
    node.tick(1.0)
    sampler.sample(ctx)
    # THEN one note says PFC counters are not sampled and how to get them, and sysfs sampling goes on
    assert len(ctx.notes) == 1 and "PFC" in ctx.notes[0] and "eth0" in ctx.notes[0]
    assert "install ethtool" in ctx.notes[0].lower()
    recs = [json.loads(x) for x in (tmp_path / "run" / "counters" / "h.rdma.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and all("ethtool" not in r and r["counters"] for r in recs)


def test_pause_received_20_percent_is_a_warning_naming_port_and_priority(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN eth1 (mlx5_1) paused by the switch on priority 3 for 2 s of every 10 s, 2000 pause episodes each
    pause = {"rx_prio3_pause": 4000, "rx_prio3_pause_duration": US_PER_TICK // 5, "rx_prio3_pause_transition": 2000}
    path, _, _ = _sample(tmp_path, monkeypatch, {"eth1": pause})
    # WHEN analyzed
    findings = _pfc(path)
    # THEN one warning names mlx5_1 port 1 (eth1) on node-r, priority 3, 20% of the 50 s window
    assert [(f.evidence["check"], f.evidence["device"], f.severity) for f in findings] == [
        ("pfc_rx", "mlx5_1", Severity.WARNING)]
    f = findings[0]
    assert f.title == "PFC pause received on mlx5_1 port 1 (eth1) on host node-r: priority 3 paused 20% of 50 s"
    ev = f.evidence
    assert ev["priority"] == "3" and ev["share_of_time"] == 0.2 and ev["window"]["seconds"] == 50.0
    assert ev["priorities"]["3"]["pause_episodes_per_s"] == 200.0 and ev["priorities"]["3"]["mean_pause_us"] == 1000.0
    assert ev["lossless_priorities"] == ["3"] and ev["thresholds"]["paused_share"] == 0.05
    # AND the advice names the QoS tool for that netdev, NCCL's traffic class and ECN / DCQCN
    assert "mlnx_qos -i eth1" in f.recommendation and "NCCL_IB_TC" in f.recommendation
    assert "No ECN marks or CNPs" in f.recommendation and "incast" in f.recommendation


def test_pause_sent_is_a_host_side_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN eth0 (mlx5_0) sending PFC pauses on priority 3 for 10% of the time
    path, _, _ = _sample(tmp_path, monkeypatch, {"eth0": {"tx_prio3_pause": 3000,
                                                          "tx_prio3_pause_duration": US_PER_TICK // 10}})
    # WHEN analyzed
    findings = _pfc(path)
    # THEN one pause-sent warning on mlx5_0 priority 3, pointing at the host's receive path
    assert [(f.evidence["check"], f.evidence["device"], f.evidence["priority"]) for f in findings] == [
        ("pfc_tx", "mlx5_0", "3")]
    assert "10%" in findings[0].title and "PCIe" in findings[0].recommendation


def test_pause_frames_without_a_duration_counter_use_the_frame_rate(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a driver without pause-duration counters, eth1 receiving 500 pause frames/s on priority 3
    eth = FakeEthtool(["eth0", "eth1"], without=("rx_prio3_pause_duration", "tx_prio3_pause_duration"))
    path, _, _ = _sample(tmp_path, monkeypatch, {"eth1": {"rx_prio3_pause": 5000}}, eth=eth)
    # WHEN analyzed
    findings = _pfc(path)
    # THEN the warning gives the frame rate and no share
    assert [f.title for f in findings] == [
        "PFC pause received on mlx5_1 port 1 (eth1) on host node-r: priority 3 500 pause frames/s over 50 s"]
    assert findings[0].evidence["priorities"]["3"]["paused_share"] is None


def test_pause_storm_error_is_critical_and_warning_events_a_warning(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN eth0's PFC storm watchdog disabling pause once (error event) in a 10 s interval, eth1's only warning
    path, _, _ = _sample(tmp_path, monkeypatch, {
        "eth0": {"tx_pause_storm_warning_events": 1, "tx_pause_storm_error_events": 1, "tx_prio3_pause": 100},
        "eth1": {"tx_pause_storm_warning_events": 1}}, ticks=1)
    # WHEN analyzed
    findings = {f.evidence["device"]: f for f in _pfc(path)}
    # THEN mlx5_0 is critical naming the error events and priority 3, mlx5_1 a warning
    assert {d: (f.evidence["check"], f.severity) for d, f in findings.items()} == {
        "mlx5_0": ("pfc_storm", Severity.CRITICAL), "mlx5_1": ("pfc_storm", Severity.WARNING)}
    assert "tx_pause_storm_error_events +1" in findings["mlx5_0"].title and findings["mlx5_0"].evidence["priority"] == "3"
    assert "pfc-prevention-tout" in findings["mlx5_0"].recommendation


def test_discards_on_a_lossless_class_are_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN eth1 dropping 50 packets/s for lack of receive buffer on priority 3
    path, _, _ = _sample(tmp_path, monkeypatch, {"eth1": {"rx_prio3_buf_discard": 500, "rx_discards_phy": 500}})
    # WHEN analyzed
    findings = _pfc(path)
    # THEN one discards warning on mlx5_1 with the rates, the priority and the retransmission advice
    assert [(f.evidence["check"], f.evidence["device"], f.evidence["priority"]) for f in findings] == [
        ("discards", "mlx5_1", "3")]
    assert findings[0].evidence["rates"] == {"rx_prio3_buf_discard_per_s": 50.0, "rx_discards_phy_per_s": 50.0}
    assert "retransmission" in findings[0].recommendation and "NCCL_IB_TC" in findings[0].recommendation


def test_clean_roce_ports_give_no_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two busy RoCE ports whose flow-control counters stay flat, but for 1% pause on eth1 (below 5%)
    path, _, _ = _sample(tmp_path, monkeypatch, {"eth1": {"rx_prio3_pause": 100,
                                                          "rx_prio3_pause_duration": US_PER_TICK // 100}})
    store = counter_store([path])
    # WHEN analyzed
    findings = analyze_rdma_pfc(Analysis(store))
    # THEN the analyzer saw both ports' counters over the whole window, and found nothing
    series = pfc_series(store)
    assert sorted(series["device"].unique()) == ["mlx5_0", "mlx5_1"] and series["dt_s"].sum() == 100.0
    assert series.loc[series["device"] == "mlx5_1", "rx_prio3_pause_duration"].sum() == 5 * US_PER_TICK // 100
    assert findings == []


def test_offline_ethtool_dump_is_recognised_mapped_and_analyzed(tmp_path: Path) -> None:
    # GIVEN a run folder with sysfs samples of node-r (mlx5_1 has netdev eth1) and, under a name that says
    # nothing, repeated `ethtool -S eth1` outputs each after a `date +%s.%N` line, paused 25% on priority 3
    run = tmp_path / "run"
    node = FakeRdmaNode(tmp_path / "sys", "node-r", devices=("mlx5_0", "mlx5_1"), link_layer="Ethernet", netdev="eth")
    eth = FakeEthtool(["eth1"])
    lines, recs = ["# host=node-r"], []
    for i in range(7):
        if i:
            node.tick(TICK_S, gbps=100.0)
            eth.add("eth1", rx_prio3_pause=9000, rx_prio3_pause_duration=US_PER_TICK // 4)
        recs.extend(node.snap())
        lines += [f"{node.now_ns / 1e9:.9f}", "$ ethtool -S eth1", eth.text("eth1")]
    (run / "counters").mkdir(parents=True)
    (run / "counters" / "capture-01.log").write_text("\n".join(lines))
    (run / "counters" / "node-r.rdma.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    # WHEN the run is analyzed end to end
    result = analyzed(run, tmp_path / "out", cache=False, workers=1)
    # THEN the dump is loaded by content, its counters land on mlx5_1 port 1, and the pause is found
    assert result.store.run_info.counter_sources == {"ethtool_dump": 1, "rdma_jsonl": 1}
    pfc = [f for f in result.findings if f.analyzer == "rdma_pfc"]
    assert [(f.evidence["check"], f.evidence["device"], f.evidence["netdev"], f.evidence["share_of_time"])
            for f in pfc] == [("pfc_rx", "mlx5_1", "eth1", 0.25)]
    # AND the RDMA report section shows the PFC share and the finding
    html = result.report_path.read_text()
    assert "PFC rx paused" in html and "PFC pause received on mlx5_1 port 1 (eth1)" in html
    # AND without sysfs records the netdev itself stands for the port
    alone = counter_store([run / "counters" / "capture-01.log"])
    assert set(alone["counters"]["device"].astype(str)) == {"eth1"}
    assert [f.evidence["device"] for f in analyze_rdma_pfc(Analysis(alone))] == ["eth1"]


def test_offline_dump_without_times_or_netdev_is_noted(tmp_path: Path) -> None:
    # GIVEN an `ethtool -S` output without a time line, and one with a time but no netdev
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(ETHTOOL_FIXTURE.read_text())
    b.write_text("1800000000.5\n" + ETHTOOL_FIXTURE.read_text())
    # WHEN loaded
    _, notes, learned = load_counter_inputs([a, b])
    # THEN both are recognised, nothing is loaded, and each gets a note saying what to add
    assert learned.counter_sources == {"ethtool_dump": 2}
    assert ["time line" in n.message for n in notes] == [True, False] and "# netdev=" in notes[1].message


def test_communication_straggler_is_joined_to_pfc_pauses_on_its_nic(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN RoCE samples of node-r where eth1 (mlx5_1) is paused 20% of the time, and rank 1 on node-r using mlx5_1
    pause = {"rx_prio3_pause": 4000, "rx_prio3_pause_duration": US_PER_TICK // 5}
    path, _, _ = _sample(tmp_path, monkeypatch, {"eth1": pause})
    store = counter_store([path])
    host = "node-r"
    store.set_table("config", conform("config", pd.DataFrame([
        {"rank": r, "host": host, "pid": r, "key": k, "value": v, "source": "env", "evidence": ""}
        for r in (0, 1) for k, v in (("LOCAL_RANK", str(r)), ("NCCL_IB_HCA", f"mlx5_{r}"))])))
    straggler = Finding(analyzer="straggler", severity=Severity.WARNING, title="Rank 1 is a persistent communication "
                        "straggler", recommendation="Check its NIC.", evidence={"kind": "communication",
                                                                               "share_last": 0.9},
                        ranks=(1,), cost=Cost(0.02, 0.1), key="straggler:1")
    # WHEN the findings are linked
    linked = {f.analyzer: f for f in link_findings(Analysis(store), [straggler, *analyze_rdma_pfc(Analysis(store))])}
    # THEN the PFC finding is the straggler's chain and explains its time, and the recommendation leads with it
    s, pfc = linked["straggler"], linked["rdma_pfc"]
    assert [(c["id"], c["explains"]) for c in s.evidence["root_cause"]["chain"]] == [(pfc.id, True)]
    assert pfc.cost == s.cost and pfc.ranks == (1,) and s.id in pfc.related
    assert s.recommendation.startswith("Likely cause: PFC pause received on mlx5_1 port 1 (eth1)")


def test_roce_sample_shows_pfc_pauses_on_node_b() -> None:
    # GIVEN the project-written RoCE sample's synthetic counters (scripts/make_sample_nccl.py)
    counters = Path(__file__).resolve().parents[2] / "sample_traces" / "nccl-roce-2node-misconfig" / "counters"
    # WHEN its counters are analyzed
    findings = analyze_rdma_pfc(Analysis(counter_store(sorted(counters.glob("*.rdma.jsonl")))))
    # THEN the one finding is the one sample_traces/README.md promises
    assert [f.title for f in findings] == [
        "PFC pause received on mlx5_1 port 1 (eth1) on host nodeB: priority 3 paused 18% of 60 s"]
