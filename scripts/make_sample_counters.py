"""Write synthetic host counters into the sample run: counters/vm.gpu.jsonl and counters/vm.rdma.jsonl.

The sample run was made on a CPU-only machine without RDMA, so these samples are made up, in the
run-directory formats of `perftracker/collectors/counters/gpu_samples.py` and `perftracker/collectors/counters/rdma.py`:
four GPUs (GPU r is rank r's, LOCAL_RANK r) sampled every 0.5 s over the run's step window, where
GPU 2 (the slow rank's) is in HW thermal slowdown 40% of the time at 1410 MHz, GPU 1 shows a slow
rise of NVLink CRC flit errors (6/s: worth knowing, not yet a problem), and two healthy
400G InfiniBand ports carrying the same light traffic. Deterministic: the same run gives the same files.

    python scripts/make_sample_counters.py [RUN_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
HOST = "vm"
PERIOD_NS = 500_000_000


def _window(run: Path) -> tuple[int, int]:
    starts, ends = [], []
    for path in sorted((run / "steps").glob("rank-*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            starts.append(int(rec["start_ns"]))
            ends.append(int(rec["end_ns"]))
    return min(starts), max(ends)


def gpu_records(t0: int, t1: int) -> list[dict[str, Any]]:
    out = []
    for i, ts in enumerate(range(t0, t1 + PERIOD_NS, PERIOD_NS)):
        for gpu in range(4):
            hot = gpu == 2 and i % 5 in (1, 2)  # 40% of the samples
            metrics = {"sm_clock_mhz": 1410 if hot else 1980 - 15 * (gpu % 2), "mem_clock_mhz": 2619,
                       "max_sm_clock_mhz": 1980, "power_w": round(540.0 if hot else 610.0 + 7 * gpu + (i % 3), 1),
                       "power_limit_w": 700.0, "temp_c": 88 + i % 2 if hot else 63 + gpu + i % 2,
                       "util_gpu_pct": 96, "util_mem_pct": 38, "clock_event_reasons": 0x40 if hot else 0,
                       "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5, "pcie_max_width": 16,
                       "ecc_sbe": 0, "ecc_dbe": 0, "xid": [],
                       "pcie_tx_kbps": 41_000 + 500 * (i % 4), "pcie_rx_kbps": 39_000 + 400 * (i % 3), "pcie_replay": 2,
                       "nvlink_links": 18, "nvlink_active": 18, "nvlink_replay": 0, "nvlink_recovery": 0,
                       # GPU 1: a few NVLink CRC flit errors a second (info: replays absorb them)
                       "nvlink_crc_flit": 40 + 3 * i if gpu == 1 else 0, "nvlink_crc_data": 0,
                       "nvlink_tx_kib": 1_000_000 + 9_000 * i, "nvlink_rx_kib": 1_000_000 + 9_000 * i}
            out.append({"ts_ns": ts, "host": HOST, "gpu": gpu, "uuid": f"GPU-5a3e0000-0000-4000-8000-00000000000{gpu}",
                        "pci_bus_id": f"00000000:{0x18 + 0x10 * gpu:02X}:00.0", "numa_node": gpu // 2,
                        "pids": [41_000 + gpu], "ranks": [gpu], "metrics": metrics})
    return out


def rdma_records(t0: int, t1: int) -> list[dict[str, Any]]:
    out = []
    data = {"mlx5_0": 10_000_000, "mlx5_1": 12_000_000}
    for i, ts in enumerate(range(t0, t1 + PERIOD_NS, PERIOD_NS)):
        for n, dev in enumerate(data):
            if i:
                data[dev] += int(8e9 / 8 * PERIOD_NS / 1e9 / 4) + 1000 * (i % 3)  # about 8 Gb/s, octets / 4
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


def main(argv: list[str]) -> int:
    run = Path(argv[0]) if argv else RUN
    t0, t1 = _window(run)
    folder = run / "counters"
    folder.mkdir(parents=True, exist_ok=True)
    for name, recs in ((f"{HOST}.gpu.jsonl", gpu_records(t0, t1)), (f"{HOST}.rdma.jsonl", rdma_records(t0, t1))):
        (folder / name).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
        print(f"wrote {folder / name}: {len(recs)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
