"""The NVML sampler against a test double of pynvml: new PCIe / NVLink fields, the job's GPUs only, ranks
attached, unsupported calls left out; and its samples, loaded and analyzed, name the faulty links."""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from api_helpers import analyzed

from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.topology import rank_map
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers import nvml_sampler
from perftracker.live.samplers.nvml_sampler import NvmlSampler

from .fake_pynvml import FakeGpu, FakePynvml, public_names

HOST = "node-7"
T0_NS = 1_800_000_000_000_000_000
NVLINK_FIELDS = {"nvlink_links", "nvlink_active", "nvlink_replay", "nvlink_recovery", "nvlink_crc_flit",
                 "nvlink_crc_data", "nvlink_tx_kib", "nvlink_rx_kib"}


def _worker(rank: int, pid: int) -> Worker:
    return Worker(rank=rank, local_rank=rank, pid=pid, host=HOST, cmdline="python train.py", run_id="r1",
                  world_size=2, parent=1)


def _ctx(tmp_path: Path, workers: list[Worker]) -> LiveContext:
    return LiveContext(run_dir=tmp_path / "run", job=Job(workers, run_id="r1"), host=HOST)


def _h100(index: int, pids: list[int], **kw: Any) -> FakeGpu:
    return FakeGpu(index=index, nvlinks=18, pids=pids, **kw)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sampler's wall clock: starts at T0 and is moved by the test (5 s per sample)."""
    now = [T0_NS]
    monkeypatch.setattr(nvml_sampler, "time", SimpleNamespace(time_ns=lambda: now[0]))
    return now


def _run(ctx: LiveContext, fake: FakePynvml, samples: int, clock: list[int] | None = None) -> NvmlSampler:
    sampler = NvmlSampler(interval_s=5.0)
    sampler.start(ctx)
    try:
        for i in range(samples):
            if i:
                fake.tick()
                if clock is not None:
                    clock[0] += 5 * 10**9
            sampler.sample(ctx)
    finally:
        sampler.stop(ctx)
    return sampler


def _lines(ctx: LiveContext) -> list[dict[str, Any]]:
    path = ctx.run_dir / "counters" / f"{HOST}.gpu.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_double_has_the_real_pynvml_names_and_values() -> None:
    # GIVEN the real nvidia-ml-py module (importing it needs no GPU)
    real = importlib.import_module("pynvml")
    # THEN every function and constant the double offers exists there, constants with the same value,
    # so the sampler cannot pass against the double while calling names NVML does not have
    for name in public_names(FakePynvml):
        assert hasattr(real, name), name
        if not callable(getattr(FakePynvml, name)):
            assert getattr(real, name) == getattr(FakePynvml, name), name
    for name in ("NVMLError", "NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_Timeout"):
        assert issubclass(getattr(real, name), Exception)


def test_samples_only_the_jobs_gpus_with_pcie_and_nvlink_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  clock: list[int]) -> None:
    # GIVEN a host with three GPUs: 0 an H100 with 18 NVLinks, link 5 down and CRC errors rising on link 7,
    # running rank 1; 1 a PCIe-only GPU running rank 0; 2 an H100 running someone else's process
    fake = FakePynvml([_h100(0, [4001], down_links={5}, crc_flit_per_tick={7: 40}),
                       FakeGpu(index=1, pids=[4000]), _h100(2, [9999])])
    fake.xids.append((0, 79))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = _ctx(tmp_path, [_worker(0, 4000), _worker(1, 4001)])
    # WHEN sampled twice (after waiting for the XID watcher to pick up the queued event)
    sampler = NvmlSampler()
    sampler.start(ctx)
    deadline = time.monotonic() + 5
    while not sampler._xids and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.sample(ctx)
    fake.tick()
    clock[0] += 5 * 10**9
    sampler.sample(ctx)
    sampler.stop(ctx)
    lines = _lines(ctx)
    # THEN only GPUs 0 and 1 are sampled, each line naming the session's host, the job's pids and ranks on it
    assert [(line["gpu"], line["host"], line["pids"], line["ranks"]) for line in lines] == [
        (0, HOST, [4001], [1]), (1, HOST, [4000], [0])] * 2
    first0, first1, second0, second1 = lines
    m0, m1 = first0["metrics"], first1["metrics"]
    # AND GPU 0 has the NVLink counts and summed counters, PCIe throughput (KB/s) and replays, and the XID
    assert (m0["nvlink_links"], m0["nvlink_active"]) == (18, 17)
    assert NVLINK_FIELDS <= m0.keys()
    assert second0["metrics"]["nvlink_crc_flit"] - m0["nvlink_crc_flit"] == 40
    assert second0["metrics"]["nvlink_tx_kib"] > m0["nvlink_tx_kib"]
    assert (m0["pcie_tx_kbps"], m0["pcie_rx_kbps"], m0["pcie_replay"]) == (1200, 800, 3)
    assert m0["xid"] == [79] and second0["metrics"]["xid"] == []
    # AND the PCIe-only GPU has the PCIe fields and no NVLink field at all
    assert not NVLINK_FIELDS & m1.keys() and {"pcie_tx_kbps", "pcie_replay", "sm_clock_mhz"} <= m1.keys()
    assert first1["uuid"] == "GPU-fake-0001" and first1["pci_bus_id"] == "00000000:19:00.0"
    assert second1["ts_ns"] - first1["ts_ns"] == 5 * 10**9
    # AND the choice is noted once, naming the GPUs and why
    notes = [n for n in ctx.notes if n.startswith("GPU:")]
    assert len(notes) == 1 and "GPU(s) 0, 1 of 3" in notes[0] and "ranks 0, 1" in notes[0]


def test_samples_every_gpu_when_no_job_process_is_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN NVML lists processes, but none of them is the job's (a container with its own PID namespace)
    fake = FakePynvml([_h100(0, [123]), _h100(1, [])])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = _ctx(tmp_path, [_worker(0, 4000)])
    # WHEN sampled
    _run(ctx, fake, 2)
    lines = _lines(ctx)
    # THEN every GPU is sampled, without ranks, and the note says why
    assert [(line["gpu"], line["ranks"], line["pids"]) for line in lines] == [(0, [], []), (1, [], [])] * 2
    assert any("all 2 GPU(s) were sampled" in n and "PID namespace" in n for n in ctx.notes)


def test_no_crash_when_every_nvml_query_is_not_supported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a driver that answers NotSupported to every device query (device count and handles aside)
    fake = FakePynvml([_h100(0, [4000]), FakeGpu(index=1)], unsupported=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = _ctx(tmp_path, [_worker(0, 4000)])
    # WHEN sampled
    sampler = _run(ctx, fake, 2)
    lines = _lines(ctx)
    # THEN each GPU still gets a line with no metric at all, and the notes say processes could not be listed
    assert sampler.samples == 2 and [line["gpu"] for line in lines] == [0, 1, 0, 1]
    assert all(line["metrics"] == {"xid": []} and line["uuid"] is None for line in lines)
    assert fake.calls["nvmlDeviceGetNvLinkState"] >= 36 and fake.calls["nvmlDeviceGetPcieThroughput"] >= 2
    assert any("could not list the processes" in n for n in ctx.notes)


def test_without_nvml_the_sampler_notes_it_and_writes_nothing(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an NVML whose init fails (no driver)
    fake = FakePynvml([])

    def no_driver() -> None:
        raise fake.NVMLError()

    monkeypatch.setattr(fake, "nvmlInit", no_driver, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = _ctx(tmp_path, [_worker(0, 4000)])
    # WHEN started and sampled
    sampler = _run(ctx, fake, 1)
    # THEN nothing is written and the note says NVML is missing
    assert sampler.state == "no NVML" and not (ctx.run_dir / "counters").exists()
    assert any("NVML is not available" in n for n in ctx.notes)


def _by_check(findings: list[Finding]) -> dict[tuple[str, int], Finding]:
    return {(str(f.evidence["check"]), int(f.evidence["gpu"])): f for f in findings if f.analyzer == "gpu_links"}


def test_sampled_link_faults_are_found_on_the_right_gpu_and_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 clock: list[int]) -> None:
    # GIVEN three job GPUs on one host, ranks placed out of order (so only NVML can tell where they run):
    # GPU 0 (rank 2): 1 of 18 NVLinks down, 1000 CRC flit errors and 2 replays per 5 s sample;
    # GPU 1 (rank 0): PCIe-only, its replay counter rising by 10 per sample (120/min);
    # GPU 2 (rank 1): a clean H100 whose old NVLink / PCIe error counts stay where they were
    fake = FakePynvml([_h100(0, [4002], down_links={5}, crc_flit_per_tick={3: 600, 7: 400}, replay_per_tick={7: 2}),
                       FakeGpu(index=1, pids=[4000], pcie_replay_per_tick=10),
                       _h100(2, [4001], crc_flit={1: 5}, replay={1: 1}, pcie_replay=7)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = _ctx(tmp_path, [_worker(0, 4000), _worker(1, 4001), _worker(2, 4002)])
    # WHEN sampled 7 times (30 s) and the run directory is analyzed
    _run(ctx, fake, 7, clock)
    result = analyzed(ctx.run_dir, tmp_path / "out", cache=False, workers=1)
    found = _by_check(result.findings)
    # THEN the rank map ties each rank to the GPU NVML listed it on
    rmap = rank_map(result.store)
    assert {(int(r), int(g)) for r, g in zip(rmap["rank"], rmap["gpu"])} == {(0, 1), (1, 2), (2, 0)}
    assert set(rmap["gpu_source"]) == {"nvml"}
    # AND GPU 0 has rising NVLink errors (rate over DCGM's 100/s) and a link down, naming rank 2
    errors, down = found[("nvlink_errors", 0)], found[("nvlink_down", 0)]
    assert errors.severity == Severity.WARNING and errors.ranks == (2,)
    assert errors.evidence["nvlink_crc_flit_increase"] == 6000 and errors.evidence["nvlink_replay_increase"] == 12
    assert errors.evidence["crc_rate_per_s"] == 200.0 and errors.evidence["window_s"] == 30.0
    assert "GPU 0 on host node-7 (rank 2) NVLink errors rising" in errors.title
    assert "nvidia-smi nvlink -e -i 0" in errors.recommendation
    assert down.severity == Severity.CRITICAL and down.ranks == (2,)  # below its peer GPU 2 (18 active)
    assert (down.evidence["nvlink_active_min"], down.evidence["nvlink_links"]) == (17, 18)
    assert "17 of 18 active" in down.title and "nvidia-smi nvlink -s -i 0" in down.recommendation
    # AND GPU 1's PCIe replays are a warning naming rank 0
    pcie = found[("pcie_replay", 1)]
    assert pcie.severity == Severity.WARNING and pcie.ranks == (0,)
    assert pcie.evidence["pcie_replay_increase"] == 60 and pcie.evidence["rate_per_min"] == 120.0
    assert "nvidia-smi -q -d PCIE" in pcie.recommendation
    # AND nothing else: the clean GPU 2 gets no link finding despite its nonzero counters
    assert set(found) == {("nvlink_errors", 0), ("nvlink_down", 0), ("pcie_replay", 1)}
    # AND the report's GPU section lists them
    assert "NVLinks down: 17 of 18 active" in result.report_path.read_text()
