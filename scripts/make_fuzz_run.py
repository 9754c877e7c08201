"""Regenerate tests/fixtures/fuzz_run/: one small run directory holding every kind of input perftracker reads.

It is the seed the fuzz tests (tests/test_fuzz.py) and `scripts/fuzz.py` mutate: each file is a short
head of a real input of this repository (sample_traces/ and tests/fixtures/), so the mutations start
from what the parsers really see. Two ranks; a few kilobytes per file, ~60 KB in all.

    python scripts/make_fuzz_run.py
"""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "fuzz_run"
SAMPLES = ROOT / "sample_traces"
FIXTURES = ROOT / "tests" / "fixtures"


def _head_lines(path: Path, n: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return "".join(line for _, line in zip(range(n), handle))


def _small_trace(rank: int, events: int = 120) -> bytes:
    """The first events of a real DDP trace (gloo, CPU), with its header and trailing keys."""
    doc = json.loads(gzip.decompress((SAMPLES / "ddp-gloo-4rank-slow-rank2" / "traces" /
                                      f"rank-{rank}.pt.trace.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "X"][:events]
    return json.dumps(doc).encode()


# A training log's throughput lines, one per trainer format formats/framework_throughput.py reads.
THROUGHPUT_LINES = (
    " [2024-09-03 15:56:55] iteration       20/  500000 | elapsed time per iteration (ms): 12137.8 | throughput per "
    "GPU (TFLOP/s/GPU): 412.5 | learning rate: 6.976744E-07 |\n"
    "[rank0]:\x1b[31mstep: 10  \x1b[32mloss:  7.1234  \x1b[36mtflops: 1,234.56  \x1b[35mmfu: 39.57%\x1b[39m\n"
    "[NeMo I] global_step: 50 | TFLOPS_per_GPU: 480.25\n"
)
def _small_nsys_export(out: Path) -> None:
    """A short head of a real Nsight Systems export (tests/fixtures/nsys, pipit's saxpy run, Nsight 2022.2): the
    tables perftracker reads, their first rows, the strings they name, in 512-byte pages."""
    import lzma
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        src = Path(folder) / "src.sqlite"
        src.write_bytes(lzma.decompress((FIXTURES / "nsys" / "pipit_saxpy_mpi_rank0.sqlite.xz").read_bytes()))
        out.unlink(missing_ok=True)
        conn = sqlite3.connect(out)
        conn.execute("PRAGMA page_size = 512")
        conn.execute("ATTACH DATABASE ? AS src", (str(src),))
        for table, rows in (("CUPTI_ACTIVITY_KIND_KERNEL", 5), ("CUPTI_ACTIVITY_KIND_MEMCPY", 6),
                            ("CUPTI_ACTIVITY_KIND_RUNTIME", 30), ("NVTX_EVENTS", 12), ("TARGET_INFO_GPU", 1),
                            ("TARGET_INFO_SESSION_START_TIME", 1), ("EXPORT_META_DATA", 3)):
            conn.execute(f"CREATE TABLE {table} AS SELECT * FROM src.{table} LIMIT {rows}")
        conn.execute("CREATE TABLE StringIds AS SELECT * FROM src.StringIds WHERE id IN (SELECT demangledName FROM "
                     "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION "
                     "SELECT textId FROM NVTX_EVENTS)")
        conn.commit()
        conn.execute("DETACH DATABASE src")
        conn.execute("VACUUM")
        conn.close()


# Option files (not inputs of the run): the seeds of the fuzz targets "thresholds" and "devices"
THRESHOLDS_TOML = """# Threshold overrides, as a user writes them for --thresholds (seed of the fuzz target "thresholds")
"straggler.alpha" = 0.005
"degradation.min_steps" = 12

[straggler]
min_trials = 5

[efficiency]
"""
DEVICES_TOML = """# A user's device table for --devices (seed of the fuzz target "devices")
[[device]]
name = "H100-lab"
patterns = ['H100.*lab', "NVIDIA H100 [0-9]+GB"]
memory_tbps = 3.35
bf16 = 989.0
fp16 = 989.0
source = "datasheet"
note = "a lab part"

[[device]]
name = "A100-lab"
patterns = ['A100']
memory_tbps = 2.0
tf32 = 156.0
"""


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    for sub in ("traces", "steps", "env", "nccl", "counters", "output", "fr", "errors", "profiles", "stacks/snap",
                "inspector", "nsys", "options"):
        (OUT / sub).mkdir(parents=True, exist_ok=True)
    manifest = json.loads((SAMPLES / "gloo-4rank-stall-rank2" / "manifest.json").read_text())
    manifest["world_size"] = 2
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (OUT / "traces" / "rank-0.pt.trace.json").write_bytes(_small_trace(0))
    (OUT / "traces" / "rank-1.pt.trace.json.gz").write_bytes(gzip.compress(_small_trace(1), mtime=0))
    for rank in (0, 1):
        (OUT / "steps" / f"rank-{rank}.jsonl").write_text(
            _head_lines(SAMPLES / "gloo-4rank-stall-rank2" / "steps" / f"rank-{rank}.jsonl", 12))
        shutil.copy(SAMPLES / "nccl-roce-2node-misconfig" / "env" / f"rank-{rank}.json", OUT / "env")
        shutil.copy(SAMPLES / "attach-4rank-slow-rank2" / "profiles" / f"rank-{rank}.json", OUT / "profiles")
        (OUT / "profiles" / f"rank-{rank}.txt").write_text(
            _head_lines(SAMPLES / "attach-4rank-slow-rank2" / "profiles" / f"rank-{rank}.txt", 8))
        snap = sorted((SAMPLES / "attach-4rank-slow-rank2" / "stacks").iterdir())[0]
        shutil.copy(snap / f"rank-{rank}.json", OUT / "stacks" / "snap")
    shutil.copy(FIXTURES / "nccl" / "debug_files" / "nodeC.3001.log", OUT / "nccl")
    (OUT / "output" / "job.log").write_text(_head_lines(SAMPLES / "nccl-roce-2node-misconfig" / "output" / "job.log", 60))
    (OUT / "output" / "slurm-4242.out").write_text(
        _head_lines(FIXTURES / "postmortem" / "nccl_timeout" / "slurm-4242.out", 40))
    (OUT / "output" / "kern.log").write_text(_head_lines(FIXTURES / "postmortem" / "xid" / "kern.log", 10))
    (OUT / "output" / "torchrun.log").write_text(
        _head_lines(FIXTURES / "postmortem" / "child_failed" / "torchrun.log", 60))
    (OUT / "output" / "train.log").write_text(THROUGHPUT_LINES)
    shutil.copy(FIXTURES / "postmortem" / "child_failed" / "torchelastic_x1" / "attempt_0" / "5" / "error.json",
                OUT / "errors" / "error.json")
    dump = json.loads((FIXTURES / "postmortem" / "fr_mismatch" / "fr_dump_rank_0.json").read_text())
    dump["entries"] = dump.get("entries", [])[:6]
    (OUT / "fr" / "fr_dump_rank_0.json").write_text(json.dumps(dump))
    dump["rank"] = 1
    (OUT / "fr" / "nccl_trace_rank_1").write_bytes(pickle.dumps(dump, protocol=4))
    for name, lines in (("gpu-node-1.gpu.jsonl", 6), ("gpu-node-1.rdma.jsonl", 4)):
        (OUT / "counters" / name).write_text(_head_lines(SAMPLES / "synthetic-gpu-4rank-thermal" / "counters" / name,
                                                         lines))
    for name, lines in (("node-a.nvidia-smi.csv", 8), ("node-b.dcgm.prom", 30), ("node-r.mlx5-roce.ethtool-S.txt", 40)):
        (OUT / "counters" / name).write_text(_head_lines(FIXTURES / "health" / name, lines))
    for name in ("node-a-pid4100.log", "node-b-pid4105.log"):  # NCCL Inspector records of two ranks
        (OUT / "inspector" / name).write_text(_head_lines(FIXTURES / "inspector" / "straggler" / name, 6))
    _small_nsys_export(OUT / "nsys" / "saxpy-report.sqlite")  # an Nsight Systems export, one more rank
    (OUT / "options" / "thresholds.toml").write_text(THRESHOLDS_TOML)
    (OUT / "options" / "devices.toml").write_text(DEVICES_TOML)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total:,} bytes)")


if __name__ == "__main__":
    main()
