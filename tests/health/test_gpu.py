"""GPU sample loaders and the gpu_health analyzer on nvidia-smi CSV, DCGM Prometheus and gpu.jsonl samples."""

from __future__ import annotations

from pathlib import Path

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.gpu_health import analyze_gpu_health
from perftracker.collectors.counters.inputs import sniff

from .conftest import FIXTURES, T0_NS, counter_store, gpu_record, write_jsonl


def _warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity >= Severity.WARNING]


def test_inputs_are_recognised_by_content(tmp_path: Path) -> None:
    # GIVEN the fixtures copied under names that say nothing
    kinds = {}
    for src in ("node-a.nvidia-smi.csv", "node-b.dcgm.prom", "node-c.node_exporter.prom"):
        dest = tmp_path / f"x{len(kinds)}.txt"
        dest.write_bytes((FIXTURES / src).read_bytes())
        kinds[src] = sniff(dest, dest.read_text())
    # THEN each is recognised by what it holds
    assert kinds == {"node-a.nvidia-smi.csv": "smi_csv", "node-b.dcgm.prom": "prometheus",
                     "node-c.node_exporter.prom": "prometheus"}


def test_nvidia_smi_csv_thermal_throttle_names_host_and_gpu() -> None:
    # GIVEN nvidia-smi CSV from node-a where GPU 2 is in HW thermal slowdown in 4 of 10 samples
    store = counter_store([FIXTURES / "node-a.nvidia-smi.csv"])
    devices = store["devices"]
    assert set(devices["device"]) == {"gpu:0", "gpu:1", "gpu:2", "gpu:3"}
    assert devices.loc[devices["device"] == "gpu:2", "pci_bus_id"].iloc[0] == "00000000:1A:00.0"
    # WHEN analyzed
    findings = _warnings(analyze_gpu_health(Analysis(store)))
    # THEN one thermal finding names node-a GPU 2 with the share of time, clocks and periods
    assert [(f.evidence["check"], f.hosts, f.evidence["gpu"]) for f in findings] == [
        ("throttle_thermal", ("node-a",), 2)]
    ev = findings[0].evidence
    assert ev["share_of_time"] == 0.4 and ev["sm_clock_mhz_throttled"] == 1410.0
    assert ev["job_median_sm_clock_mhz"] == 1980.0 and len(ev["periods"]) == 1
    assert "thermal slowdown 40% of the time; SM clock 1410 MHz while throttled" in findings[0].title


def test_dcgm_exporter_thermal_throttle() -> None:
    # GIVEN DCGM exporter scrapes (Hostname node-b) where GPU 1 throttles thermally in half the scrapes
    store = counter_store([FIXTURES / "node-b.dcgm.prom"])
    findings = _warnings(analyze_gpu_health(Analysis(store)))
    # THEN the thermal finding is critical (50%) on node-b GPU 1, and nothing else is flagged
    assert [(f.evidence["check"], f.hosts, f.evidence["gpu"], f.severity) for f in findings] == [
        ("throttle_thermal", ("node-b",), 1, Severity.CRITICAL)]
    assert findings[0].evidence["window"]["seconds"] == 35.0


def test_healthy_gpu_samples_give_no_warnings(tmp_path: Path) -> None:
    # GIVEN eight healthy GPUs sampled 20 times (idle GPUs drop PCIe gen, which is normal)
    recs = [gpu_record("node-a", g, T0_NS + i * 10**9, temp_c=60 + g, sm_clock_mhz=1980 - 15 * (g % 3))
            for i in range(20) for g in range(8)]
    recs += [gpu_record("node-a", 0, T0_NS + 30 * 10**9, util_gpu_pct=0, pcie_gen=1, clock_event_reasons=1)]
    path = write_jsonl(tmp_path / "counters" / "node-a.gpu.jsonl", recs)
    # WHEN analyzed
    findings = analyze_gpu_health(Analysis(counter_store([path])))
    # THEN there is nothing at all
    assert findings == []


def test_xid_ecc_pcie_low_clock_and_low_utilization(tmp_path: Path) -> None:
    # GIVEN four GPUs: 0 with XID 79 and a double-bit ECC error, 1 on a x8 PCIe link, 2 with locked low
    # clocks and no reason, 3 barely utilized
    recs = []
    for i in range(10):
        ts = T0_NS + i * 10**9
        recs.append(gpu_record("node-z", 0, ts, xid=[79] if i == 4 else [], ecc_dbe=1 if i >= 6 else 0))
        recs.append(gpu_record("node-z", 1, ts, pcie_width=8))
        recs.append(gpu_record("node-z", 2, ts, sm_clock_mhz=1500))
        recs.append(gpu_record("node-z", 3, ts, util_gpu_pct=20))
    path = write_jsonl(tmp_path / "node-z.gpu.jsonl", recs)
    findings = _warnings(analyze_gpu_health(Analysis(counter_store([path]))))
    # THEN each fault is found on its GPU
    got = {(f.evidence["check"], f.evidence["gpu"], f.severity) for f in findings}
    assert got == {("xid_ecc", 0, Severity.CRITICAL), ("pcie_width", 1, Severity.WARNING),
                   ("sm_clock", 2, Severity.WARNING), ("utilization", 3, Severity.WARNING)}
    xid = next(f for f in findings if f.evidence["check"] == "xid_ecc")
    assert xid.evidence["xids"] == [79] and xid.evidence["ecc_dbe_new"] == 1.0
