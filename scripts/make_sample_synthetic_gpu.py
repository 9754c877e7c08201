"""Write sample_traces/synthetic-gpu-4rank-thermal: a synthetic GPU job whose story is causal end to end.

Everything in it is made up here, deterministically and without torch (this machine has no GPU), and
its manifest says so (`synthetic`):

- `traces/rank-<r>.pt.trace.json.gz`: Kineto traces of a 4-rank NCCL job on one host (8 profiled steps
  of ~100 ms, GPU r is rank r's) written by `benchmarks/synth.py`. Rank 2 is a compute straggler: each of
  its compute phases takes `EXTRA_US` longer on the GPU (its kernels are longer, as on a slower GPU),
  which is what a 1410 MHz SM clock against 1980 MHz does to 80 ms of kernels per step (x1.40).
- `counters/<HOST>.gpu.jsonl`: NVML samples (format: `perftracker/collectors/counters/gpu_samples.py`)
  every 0.25 s from 8 s before the traced steps to 2 s after them. GPU 2 is in HW thermal slowdown
  (clock event reason 0x40, 1410 MHz, 88-89 C) from 2 s before the traced steps to the end of the
  samples, i.e. during every traced step; GPUs 0, 1 and 3 stay healthy at 1980 MHz.
- `counters/<HOST>.rdma.jsonl`: two healthy 400G InfiniBand ports with light, equal traffic over the
  same window (format: `perftracker/collectors/counters/rdma.py`).
- `ground_truth.json`: what synth planted (not an input; the loader skips it).

Expected: rank 2 named as the compute straggler from the traces alone, and GPU 2's thermal slowdown,
whose periods overlap the traced steps, joined to it as the likely cause; no RDMA warning.

    python scripts/make_sample_synthetic_gpu.py [OUT]
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # synth.py

from synth import BASE_TIME_NS, SynthSpec, generate  # noqa: E402

from perftracker.rundir import write_manifest  # noqa: E402

OUT = ROOT / "sample_traces" / "synthetic-gpu-4rank-thermal"
SCRIPT = "scripts/make_sample_synthetic_gpu.py"
HOST = "gpu-node-1"
RANKS, STEPS, STRAGGLER = 4, 8, 2
CLOCK_MHZ, THROTTLED_MHZ = 1980, 1410
# 80% of a 100 ms step is compute, in 4 compute phases of 20 ms; at 1410 MHz instead of 1980 they take x1.40
EXTRA_US = round(100_000 * 0.8 / 4 * (CLOCK_MHZ / THROTTLED_MHZ - 1), -2)
SPEC = SynthSpec(ranks=RANKS, steps=STEPS, kernels_per_step=24, stragglers={STRAGGLER: EXTRA_US}, seed=12,
                 max_skew_us=1000.0)
PERIOD_NS = 250_000_000
BEFORE_NS, AFTER_NS, HOT_BEFORE_NS = 8_000_000_000, 2_000_000_000, 2_000_000_000
MAX_BYTES = 1_000_000


def trace_window(run: Path) -> tuple[int, int]:
    """Epoch ns of the first and last event over every rank's trace (baseTimeNanoseconds + ts)."""
    lo, hi = None, None
    for path in sorted((run / "traces").glob("rank-*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        base = int(doc["baseTimeNanoseconds"])
        for ev in doc["traceEvents"]:
            if ev.get("ph") == "X":
                start = base + round(float(ev["ts"]) * 1000)
                end = start + round(float(ev.get("dur", 0)) * 1000)
                lo = start if lo is None else min(lo, start)
                hi = end if hi is None else max(hi, end)
    assert lo is not None and hi is not None, "synth wrote no events"
    return lo, hi


def gpu_records(t0: int, t1: int) -> list[dict[str, Any]]:
    """NVML samples of the host's 4 GPUs over [t0 - BEFORE, t1 + AFTER]; GPU 2 hot from t0 - HOT_BEFORE."""
    out = []
    start = t0 - BEFORE_NS
    for i, ts in enumerate(range(start, t1 + AFTER_NS + 1, PERIOD_NS)):
        for gpu in range(RANKS):
            hot = gpu == STRAGGLER and ts >= t0 - HOT_BEFORE_NS
            metrics = {"sm_clock_mhz": THROTTLED_MHZ if hot else CLOCK_MHZ, "mem_clock_mhz": 2619,
                       "max_sm_clock_mhz": CLOCK_MHZ, "power_w": 540.0 + (i % 3) if hot else 610.0 + 7 * gpu + (i % 3),
                       "power_limit_w": 700.0, "temp_c": 88 + i % 2 if hot else 63 + gpu + i % 2,
                       "util_gpu_pct": 97, "util_mem_pct": 38, "clock_event_reasons": 0x40 if hot else 0,
                       "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5, "pcie_max_width": 16,
                       "ecc_sbe": 0, "ecc_dbe": 0, "xid": [],
                       "pcie_tx_kbps": 41_000 + 500 * (i % 4), "pcie_rx_kbps": 39_000 + 400 * (i % 3), "pcie_replay": 2,
                       "nvlink_links": 18, "nvlink_active": 18, "nvlink_replay": 0, "nvlink_recovery": 0,
                       "nvlink_crc_flit": 0, "nvlink_crc_data": 0,
                       "nvlink_tx_kib": 1_000_000 + 9_000 * i, "nvlink_rx_kib": 1_000_000 + 9_000 * i}
            out.append({"ts_ns": ts, "host": HOST, "gpu": gpu, "uuid": f"GPU-5a3e0000-0000-4000-8000-00000000000{gpu}",
                        "pci_bus_id": f"00000000:{0x18 + 0x10 * gpu:02X}:00.0", "numa_node": gpu // 2,
                        "pids": [41_000 + gpu], "ranks": [gpu], "metrics": metrics})
    return out


def rdma_records(t0: int, t1: int) -> list[dict[str, Any]]:
    """Two healthy 400G InfiniBand ports (one per NUMA node) with light, equal traffic."""
    out = []
    data = {"mlx5_0": 10_000_000, "mlx5_1": 12_000_000}
    for i, ts in enumerate(range(t0 - BEFORE_NS, t1 + AFTER_NS + 1, 4 * PERIOD_NS)):
        for n, dev in enumerate(data):
            if i:
                data[dev] += int(8e9 / 8 * 4 * PERIOD_NS / 1e9 / 4) + 1000 * (i % 3)  # about 8 Gb/s, octets / 4
            counters = {"port_xmit_data": data[dev], "port_rcv_data": data[dev], "port_xmit_packets": data[dev] // 1024,
                        "port_rcv_packets": data[dev] // 1024, "port_xmit_wait": 100 * i, "symbol_error": 0,
                        "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 0, "port_xmit_discards": 0}
            hw = {"out_of_sequence": 0, "local_ack_timeout_err": 0, "packet_seq_err": 0, "rp_cnp_handled": 0,
                  "np_cnp_sent": 0, "np_ecn_marked_roce_packets": 0, "req_transport_retries_exceeded": 0}
            out.append({"ts_ns": ts, "host": HOST, "device": dev, "port": "1", "state": "4: ACTIVE",
                        "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand",
                        "counters": counters, "hw_counters": hw, "numa_node": n,
                        "pci_bus_id": f"0000:{0x1a + 0x20 * n:02x}:00.0", "netdevs": [f"ib{n}"]})
    return out


def synthetic_entries() -> list[dict[str, str]]:
    """The manifest's `synthetic` list: every input of this sample, what wrote it and what it pretends."""
    return [
        {"path": ".", "made_by": SCRIPT, "what": "a sample written for the demo and the tests; no GPU job ran"},
        {"path": "traces/", "made_by": f"benchmarks/synth.py via {SCRIPT}",
         "what": f"Kineto traces of a {RANKS}-rank NCCL job, {STEPS} steps; rank {STRAGGLER} is given "
                 f"{EXTRA_US / 1000:.1f} ms of extra GPU kernel time before every collective"},
        {"path": f"counters/{HOST}.gpu.jsonl", "made_by": SCRIPT,
         "what": f"NVML samples; GPU {STRAGGLER} in HW thermal slowdown at {THROTTLED_MHZ} MHz during the traced steps, "
                 "the other GPUs healthy"},
        {"path": f"counters/{HOST}.rdma.jsonl", "made_by": SCRIPT,
         "what": "healthy InfiniBand port counters (2 ports, light traffic)"},
    ]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    if out.exists():
        shutil.rmtree(out)
    truth = generate(SPEC, out / "traces", truth_path=out / "ground_truth.json")
    t0, t1 = trace_window(out)
    assert t0 > BASE_TIME_NS, "traces must carry epoch times"
    folder = out / "counters"
    folder.mkdir(parents=True)
    for name, recs in ((f"{HOST}.gpu.jsonl", gpu_records(t0, t1)), (f"{HOST}.rdma.jsonl", rdma_records(t0, t1))):
        (folder / name).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
    write_manifest(out, job="synthetic-gpu-4rank-thermal (synthetic sample)", created_by=SCRIPT, device="cuda",
                   backend="nccl", hosts=[HOST], ranks=list(range(RANKS)), world_size=RANKS, profiled_steps=STEPS,
                   slowdown={"rank": STRAGGLER, "extra_us_per_collective": EXTRA_US,
                             "how": f"GPU {STRAGGLER} thermally throttled to {THROTTLED_MHZ} MHz during the traced steps"},
                   synthetic=synthetic_entries())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if size > MAX_BYTES:
        raise SystemExit(f"{out}: {size} bytes, over the {MAX_BYTES} a committed sample may take")
    print(f"wrote {out}: {size / 1e3:.0f} kB; traced steps {t0}..{t1} epoch ns; "
          f"rank {STRAGGLER} costs the others {truth.stragglers[STRAGGLER].simulated_cost_us_per_step / 1000:.1f} ms/step")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
