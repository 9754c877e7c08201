#!/usr/bin/env bash
# GPU check for `perftracker attach` (needs one NVIDIA GPU, torch with CUDA, and perftracker installed):
# runs a tiny single-GPU job with NCCL (world size 1, NCCL_DEBUG=INFO) and the step hook, attaches to it,
# and verifies NVML samples, CUDA kernels in an on-demand trace and a parsed NCCL log, in under 5 minutes.
# It prints which GPUs were sampled, the ranks NVML listed on them, and whether PCIe / NVLink counters were
# present (they are optional: a missing one is reported, not a failure).
# What it collects is copied to tests/fixtures/gpu/ (small) so it can become real test fixtures.
# Unsupported NVML calls are tolerated (the sampler skips what a GPU does not support).
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#   FIXTURES=$OUT/gpu bash scripts/gpu_check.sh   # fixtures elsewhere (e.g. to bring them back from a lent machine)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/perftracker-gpu-check}
PY=${PYTHON:-python3}
rm -rf "$OUT"; mkdir -p "$OUT"
command -v nvidia-smi >/dev/null || { echo "gpu_check: nvidia-smi not found: this needs an NVIDIA GPU" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/nvidia-smi.csv"
"$PY" -c "import torch, sys; assert torch.cuda.is_available(), 'torch has no CUDA'; print('torch', torch.__version__, torch.version.cuda)"

PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$OUT/job/nccl/%h.%p.log" KINETO_USE_DAEMON=1 \
  timeout 240 "$PY" -m torch.distributed.run --nproc_per_node 1 --master_port "$PORT" --rdzv-id gpucheck \
  scripts/sample_job.py --run-dir "$OUT/job" --device cuda --backend nccl --steps 3000 --profile-steps 0 \
  --batch 512 --width 1024 --depth 4 --step-sleep 0.01 --hook > "$OUT/job.log" 2>&1 &
JOB=$!
trap 'kill $JOB 2>/dev/null || true' EXIT
sleep 20
"$PY" -m perftracker attach runid:gpucheck --duration 60 --interval 1 --trace-steps 3 -o "$OUT/run" --quiet \
  | tee "$OUT/attach.txt"   # NCCL_DEBUG_FILE is followed automatically

"$PY" - "$OUT" <<'PYCHECK'
import json, sys
from pathlib import Path
import pandas as pd
from perftracker.analyzers.health.gpu_links import analyze_gpu_links
from perftracker.analyzers.health.topology import rank_map
from perftracker.collectors.loading import LoadOptions, load_path
out = Path(sys.argv[1])
run = out / "run"
gpu = [json.loads(l) for p in run.glob("counters/*.gpu.jsonl") for l in p.read_text().splitlines()]
assert gpu and "sm_clock_mhz" in gpu[-1]["metrics"], "no NVML samples with an SM clock"
# PCIe throughput / replays, NVLink links / errors / throughput and the job's ranks per GPU are optional
# (a GPU or driver may not support them, a container may hide the job's pids from NVML): report, never fail.
seen = sorted({k for r in gpu for k in r["metrics"]})
pcie = [k for k in ("pcie_tx_kbps", "pcie_rx_kbps", "pcie_replay") if k in seen]
nvlink = [k for k in seen if k.startswith("nvlink_")]
on_gpu: dict[int, set[int]] = {}
for r in gpu:
    on_gpu.setdefault(r["gpu"], set()).update(r.get("ranks") or [])
print("GPUs sampled (job ranks NVML listed on each):", {g: sorted(rs) for g, rs in sorted(on_gpu.items())})
print("PCIe counters:", ", ".join(pcie) if pcie else "absent")
print("NVLink counters:", ", ".join(nvlink) if nvlink else "absent (no NVLink, or NVML did not answer)")
for r in {r["gpu"]: r for r in gpu}.values():
    m = r["metrics"]
    print(f"  GPU {r['gpu']}: NVLinks {m.get('nvlink_active', '-')}/{m.get('nvlink_links', '-')} active, "
          + ", ".join(f"{k}={m[k]:g}" for k in ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery",
                                                   "nvlink_tx_kib", "pcie_tx_kbps", "pcie_rx_kbps", "pcie_replay") if k in m))
for manifest in run.glob("manifests/*.json"):
    for note in json.loads(manifest.read_text()).get("notes", []):
        if note.startswith("GPU:"):
            print("note:", note)
store = load_path(run, LoadOptions(cache_dir=None))
kernels = store.events[store.events["kind"].isin(["compute", "comm"])]
assert len(kernels) > 0, "no CUDA kernels in the on-demand trace"
assert (store.events["kind"] == "comm").any(), "no NCCL kernels in the trace"
assert not store["nccl"].empty and (store["nccl"]["key"] == "version").any(), "NCCL log not parsed"
rmap = rank_map(store)
if not rmap.empty:
    print(rmap[["rank", "host", "gpu", "gpu_source"]].to_string(index=False))
print("gpu_links findings:", [f.title for f in analyze_gpu_links(store)] or "none")
import time, pynvml
from perftracker.live.samplers.nvml_read import read_metrics
pynvml.nvmlInit()
wall, cpu = time.perf_counter(), time.process_time()
count = pynvml.nvmlDeviceGetCount()
for i in range(count):
    read_metrics(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i))
print(f"cost of one NVML sample of {count} GPU(s): {time.perf_counter() - wall:.3f} s wall, "
      f"{time.process_time() - cpu:.3f} s CPU")
print(f"OK: {len(gpu)} NVML samples, {len(kernels)} GPU kernels, NCCL {store['nccl'].loc[store['nccl']['key'] == 'version', 'value'].iloc[0]}")
PYCHECK

FIX=${FIXTURES:-tests/fixtures/gpu}; mkdir -p "$FIX"
head -n 200 "$(ls "$OUT"/run/counters/*.gpu.jsonl | head -1)" > "$FIX/h200.gpu.jsonl"
head -n 400 "$(ls "$OUT"/job/nccl/*.log | head -1)" > "$FIX/h200.nccl.log"
cp "$(ls "$OUT"/run/traces/* | head -1)" "$FIX/"
cp "$OUT/nvidia-smi.csv" "$FIX/h200.nvidia-smi.csv"
echo "gpu_check: passed; fixtures in $FIX"
