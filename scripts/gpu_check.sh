#!/usr/bin/env bash
# GPU check for `perftracker attach` (needs one NVIDIA GPU, torch with CUDA, and perftracker installed):
# runs a tiny single-GPU job with NCCL (world size 1, NCCL_DEBUG=INFO) and the step hook, attaches to it,
# and verifies NVML samples, CUDA kernels in an on-demand trace and a parsed NCCL log, in under 5 minutes.
# What it collects is copied to tests/fixtures/gpu/ (small) so it can become real test fixtures.
# Unsupported NVML calls are tolerated (the sampler skips what a GPU does not support).
#
#   bash scripts/gpu_check.sh [OUT_DIR]
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
from perftracker.collectors.loading import LoadOptions, load_path
out = Path(sys.argv[1])
run = out / "run"
gpu = [json.loads(l) for p in run.glob("counters/*.gpu.jsonl") for l in p.read_text().splitlines()]
assert gpu and "sm_clock_mhz" in gpu[-1]["metrics"], "no NVML samples with an SM clock"
store = load_path(run, LoadOptions(cache_dir=None), out / "scratch")
kernels = store.events[store.events["kind"].isin(["compute", "comm"])]
assert len(kernels) > 0, "no CUDA kernels in the on-demand trace"
assert (store.events["kind"] == "comm").any(), "no NCCL kernels in the trace"
assert not store["nccl"].empty and (store["nccl"]["key"] == "version").any(), "NCCL log not parsed"
print(f"OK: {len(gpu)} NVML samples, {len(kernels)} GPU kernels, NCCL {store['nccl'].loc[store['nccl']['key'] == 'version', 'value'].iloc[0]}")
PYCHECK

FIX=tests/fixtures/gpu; mkdir -p "$FIX"
head -n 200 "$(ls "$OUT"/run/counters/*.gpu.jsonl | head -1)" > "$FIX/h200.gpu.jsonl"
head -n 400 "$(ls "$OUT"/job/nccl/*.log | head -1)" > "$FIX/h200.nccl.log"
cp "$(ls "$OUT"/run/traces/* | head -1)" "$FIX/"
cp "$OUT/nvidia-smi.csv" "$FIX/h200.nvidia-smi.csv"
echo "gpu_check: passed; fixtures in $FIX"
