"""RDMA collectors and analyzer on fake sysfs trees whose counters evolve, and on Prometheus samples."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.rdma import analyze_rdma, increases, port_series
from perftracker.collectors.counters.rdma import parse_rate, snapshot

from .conftest import FIXTURES, FakeRdmaNode, counter_store, write_jsonl


def _run(node: FakeRdmaNode, out: Path, ticks: int = 5, **tick_args: object) -> list[Finding]:
    path = out / "counters" / f"{node.host}.rdma.jsonl"
    write_jsonl(path, node.snap())
    for _ in range(ticks):
        node.tick(10.0, **tick_args)  # type: ignore[arg-type]
        write_jsonl(path, node.snap())
    return analyze_rdma(Analysis(counter_store([path])))


def _warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity >= Severity.WARNING]


def test_snapshot_reads_fake_tree_through_symlinks(tmp_path: Path) -> None:
    # GIVEN a fake /sys with two mlx5 devices reached through the class/infiniband symlinks
    node = FakeRdmaNode(tmp_path / "sys", "node-a", devices=("mlx5_0", "mlx5_1"))
    node.tick(1.0, gbps=80.0)
    # WHEN it is snapshotted
    recs = snapshot(tmp_path / "sys", "node-a", ts_ns=5)
    # THEN each port gives one record with state, rate, both counter groups and its PCI / NUMA place
    assert [(r["device"], r["port"]) for r in recs] == [("mlx5_0", "1"), ("mlx5_1", "1")]
    r = recs[1]
    assert r["state"] == "4: ACTIVE" and r["rate"] == "400 Gb/sec (4X NDR)" and r["link_layer"] == "InfiniBand"
    assert r["counters"]["port_xmit_data"] == int(80e9 / 8 / 4) and "np_cnp_sent" in r["hw_counters"]
    assert "lifespan" not in r["hw_counters"]
    assert r["pci_bus_id"] == "0000:18:00.0" and r["numa_node"] == 0 and r["netdevs"] == ["ib1"]
    assert parse_rate("2.5 Gb/sec (1X SDR)") == (2.5, 1)


def test_healthy_rails_give_no_warnings_and_report_throughput(tmp_path: Path) -> None:
    # GIVEN four busy, error-free 400G rails
    node = FakeRdmaNode(tmp_path / "sys", "node-a")
    # WHEN five 10 s intervals at 300 Gb/s each are analyzed
    findings = _run(node, tmp_path, gbps=300.0)
    # THEN nothing is flagged, and the throughput info names the host and its rate against the link
    assert _warnings(findings) == []
    info = [f for f in findings if f.key == "rdma:throughput:node-a"]
    assert len(info) == 1 and "75% of 1600 Gb/s" in info[0].title
    port = info[0].evidence["ports"][0]
    assert abs(port["tx_gbps"] - 300.0) < 0.5 and port["window"]["seconds"] == 50.0


def test_congestion_is_detected_on_the_right_port(tmp_path: Path) -> None:
    # GIVEN mlx5_1 handling 5000 CNPs/s and waiting for credits, the other rails quiet
    node = FakeRdmaNode(tmp_path / "sys", "node-a")
    extra = {"mlx5_1": {"rp_cnp_handled": 50_000, "np_ecn_marked_roce_packets": 20_000, "port_xmit_wait": 40_000_000}}
    # WHEN analyzed
    findings = _warnings(_run(node, tmp_path, gbps=200.0, extra=extra))
    # THEN one congestion warning names mlx5_1 port 1 on node-a with rates and the window
    assert [(f.evidence["check"], f.evidence["device"], f.hosts) for f in findings] == [
        ("congestion", "mlx5_1", ("node-a",))]
    ev = findings[0].evidence
    assert ev["port"] == "1" and ev["rates"]["rp_cnp_handled_per_s"] == 5000.0
    assert ev["rates"]["port_xmit_wait_per_s"] == 4e6 and ev["window"]["seconds"] == 50.0


def test_flapping_link_is_critical(tmp_path: Path) -> None:
    # GIVEN mlx5_2 going down once and retraining twice, and DOWN in one sample
    node = FakeRdmaNode(tmp_path / "sys", "node-a")
    path = tmp_path / "counters" / "node-a.rdma.jsonl"
    write_jsonl(path, node.snap())
    node.tick(10.0, gbps=200.0)
    write_jsonl(path, node.snap())
    node.set_port("mlx5_2", state="1: DOWN")
    node.tick(10.0, gbps=200.0, extra={"mlx5_2": {"link_downed": 1, "link_error_recovery": 2, "symbol_error": 40}})
    write_jsonl(path, node.snap())
    node.set_port("mlx5_2", state="4: ACTIVE")
    node.tick(10.0, gbps=200.0)
    write_jsonl(path, node.snap())
    # WHEN analyzed
    findings = _warnings(analyze_rdma(Analysis(counter_store([path]))))
    # THEN a critical flap and a link-error warning name mlx5_2; the port is ACTIVE again at the end
    checks = {(f.evidence["check"], f.evidence["device"], f.severity) for f in findings}
    assert checks == {("flap", "mlx5_2", Severity.CRITICAL), ("link_errors", "mlx5_2", Severity.WARNING)}
    flap = next(f for f in findings if f.evidence["check"] == "flap")
    assert flap.evidence["increases"] == {"link_downed": 1, "link_error_recovery": 2}


def test_idle_rail_is_named_with_the_hca_setting(tmp_path: Path) -> None:
    # GIVEN three rails carrying 300 Gb/s and mlx5_3 carrying nothing
    node = FakeRdmaNode(tmp_path / "sys", "node-a")
    findings = _warnings(_run(node, tmp_path, gbps={"mlx5_0": 300.0, "mlx5_1": 300.0, "mlx5_2": 300.0}))
    # THEN the idle rail is the only warning and it names mlx5_3
    assert [(f.evidence["check"], f.evidence["device"]) for f in findings] == [("idle_rail", "mlx5_3")]
    assert "NCCL_IB_HCA" in findings[0].recommendation


def test_down_port_and_slow_port(tmp_path: Path) -> None:
    # GIVEN mlx5_0 DOWN and mlx5_1 trained at 2X (200 Gb/s) among 4X NDR ports
    node = FakeRdmaNode(tmp_path / "sys", "node-a")
    node.set_port("mlx5_0", state="1: DOWN")
    node.set_port("mlx5_1", rate="200 Gb/sec (2X NDR)")
    findings = _warnings(_run(node, tmp_path, gbps={"mlx5_1": 150.0, "mlx5_2": 150.0, "mlx5_3": 150.0}))
    checks = {(f.evidence["check"], f.evidence["device"], f.severity) for f in findings}
    # THEN the DOWN port is critical and the slow port a warning naming the peers' rate
    assert checks == {("state", "mlx5_0", Severity.CRITICAL), ("speed", "mlx5_1", Severity.WARNING)}
    speed = next(f for f in findings if f.evidence["check"] == "speed")
    assert speed.evidence["peer_rate_gbps"] == 400.0 and speed.evidence["width"] == 2.0


def test_wrap_and_reset_are_not_errors() -> None:
    # GIVEN a 32-bit queue counter wrapping and a 64-bit counter reset
    wrapped, w, r = increases(np.array([4294967290.0, 5.0, 10.0]), "out_of_sequence")
    reset, w2, r2 = increases(np.array([1000.0, 1500.0, 20.0]), "port_xmit_data")
    # THEN the wrap is unwrapped and the reset counts from zero
    assert list(wrapped) == [11.0, 5.0] and (w, r) == (1, 0)
    assert list(reset) == [500.0, 20.0] and (w2, r2) == (0, 1)


def test_wrapping_counter_in_samples_gives_no_warning(tmp_path: Path) -> None:
    # GIVEN out_of_sequence close to 2^32 that wraps during the samples
    node = FakeRdmaNode(tmp_path / "sys", "node-a", devices=("mlx5_0",))
    node.values["mlx5_0"]["out_of_sequence"] = 4294967290
    node.write()
    findings = _run(node, tmp_path, gbps=100.0, extra={"mlx5_0": {"out_of_sequence": 3}})
    node_rows = port_series(counter_store([tmp_path / "counters" / "node-a.rdma.jsonl"]))
    # THEN the increase stays 3 per interval and nothing is flagged
    assert set(node_rows["out_of_sequence"]) == {3.0} and _warnings(findings) == []


def test_raw_sysfs_copies_and_grep_dumps_are_read(tmp_path: Path) -> None:
    # GIVEN periodic copies of the port folders (<host>/<epoch>/infiniband/...) and a grep -H dump
    node = FakeRdmaNode(tmp_path / "sys", "node-a", devices=("mlx5_0", "mlx5_1"))
    dump = tmp_path / "in" / "node-d.ibcounters.txt"
    dump.parent.mkdir(parents=True)
    lines = ["# host=node-d"]
    for i in range(4):
        node.tick(10.0, gbps=100.0, extra={"mlx5_0": {"link_downed": 1}} if i == 2 else None)
        epoch = node.now_ns // 1_000_000_000
        dest = tmp_path / "in" / "copies" / "node-e" / str(epoch) / "infiniband"
        for dev in ("mlx5_0", "mlx5_1"):
            shutil.copytree(node.port_dir(dev), dest / dev / "ports" / "1")
        lines.append(str(epoch))
        for dev in ("mlx5_0", "mlx5_1"):
            port = node.port_dir(dev)
            for f in sorted((port / "counters").iterdir()) + [port / "state", port / "rate"]:
                lines.append(f"/sys/class/infiniband/{dev}/ports/1/{f.relative_to(port)}:{f.read_text().strip()}")
    dump.write_text("\n".join(lines) + "\n")
    paths = sorted(p for p in (tmp_path / "in").rglob("*") if p.is_file())
    # WHEN loaded by content and analyzed
    store = counter_store(paths)
    findings = _warnings(analyze_rdma(Analysis(store)))
    # THEN both hosts have samples and the flap on mlx5_0 is seen on each
    assert set(store["counters"]["host"].astype(str)) == {"node-d", "node-e"}
    assert {(f.hosts, f.evidence["check"], f.evidence["device"]) for f in findings} == {
        (("node-d",), "flap", "mlx5_0"), (("node-e",), "flap", "mlx5_0")}


def test_node_exporter_flapping_link(tmp_path: Path) -> None:
    # GIVEN node exporter infiniband scrapes where mlx5_1 goes down twice
    store = counter_store([FIXTURES / "node-c.node_exporter.prom"])
    findings = analyze_rdma(Analysis(store))
    # THEN the flap names node-c mlx5_1, and the throughput matches 200 Gb/s (bytes, not octets / 4)
    assert [(f.hosts, f.evidence["device"]) for f in _warnings(findings)] == [(("node-c",), "mlx5_1")]
    info = next(f for f in findings if f.evidence.get("ports"))
    assert abs(info.evidence["ports"][0]["tx_gbps"] - 200.0) < 1.0 and info.evidence["ports"][0]["rate_gbps"] == 400.0
