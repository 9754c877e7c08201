"""Side-by-side check of perftracker's GEMM model against AMD TraceLens' on the same trace (run once, by hand).

Two steps, two interpreters (TraceLens is never installed into perftracker's environment, nor its code committed):

  /tmp/venv-tracelens/bin/python benchmarks/tracelens_gemm_compare.py tracelens TRACE OUT.json
      TraceLens (installed from its source into its own venv) models every aten::mm / addmm / bmm / baddbmm /
      _scaled_mm cpu_op of TRACE (its kernel launchers' perf models): GFLOPS, kernel time, bytes.
  PYTHONPATH=. /work/main/.venv/bin/python benchmarks/tracelens_gemm_compare.py compare TRACE OUT.json
      perftracker models the same events (by name and start) and prints the largest relative differences in FLOPs,
      bytes and GPU time, and how many events agree within 2%.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

GEMMS: tuple[str, ...] = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
ATTENTION = ("aten::_scaled_dot_product_flash_attention",)  # compared with ATTENTION=1 in the environment

if os.environ.get("ATTENTION") == "1":
    GEMMS = ATTENTION


def tracelens_side(trace: str, out: str) -> None:
    from TraceLens import TreePerfAnalyzer  # type: ignore[import-not-found]

    analyzer = TreePerfAnalyzer.from_file(trace)
    events = [e for e in analyzer.tree.events if e.get("cat") == "cpu_op" and e.get("name") in GEMMS]
    df = analyzer.build_df_perf_metrics(events, include_args=True)
    rows = []
    for event, (_, row) in zip(events, df.iterrows()):
        rows.append({"name": event["name"], "ts": event["ts"], "gflops": float(row["GFLOPS"]),
                     "kernel_us": float(row["Kernel Time (µs)"]), "data_mb": float(row.get("Data Moved (MB)", "nan"))})
    Path(out).write_text(json.dumps(rows))
    print(f"{len(rows)} GEMM events modelled by TraceLens")


def compare_side(trace: str, theirs_file: str) -> None:
    import gzip

    import numpy as np

    from perftracker.analyzers.efficiency.models import model_op
    from perftracker.analyzers.efficiency.shapes import parse_args

    theirs = {(r["name"], round(r["ts"] * 1000)): r for r in json.loads(Path(theirs_file).read_text())}
    raw = json.loads(gzip.decompress(Path(trace).read_bytes()) if trace.endswith(".gz") else Path(trace).read_text())
    kernels = {}
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel":
            kernels.setdefault(e["args"].get("correlation"), []).append(e)
    flops_diff, bytes_diff = [], []
    for e in raw["traceEvents"]:
        key = (e.get("name"), round(e.get("ts", 0) * 1000))
        if e.get("cat") != "cpu_op" or key not in theirs:
            continue
        a = e["args"]
        args = parse_args(json.dumps(a["Input Dims"]), json.dumps(a["Input type"]), json.dumps(a.get("Concrete Inputs", [])))
        model = model_op(e["name"], args) if args is not None else None
        if model is None:
            continue
        t = theirs[key]
        flops_diff.append(abs(model.flops - t["gflops"] * 1e9) / (t["gflops"] * 1e9))
        if t["data_mb"] == t["data_mb"]:
            bytes_diff.append(abs(model.bytes - t["data_mb"] * 1024 * 1024) / (t["data_mb"] * 1024 * 1024))
    f, b = np.array(flops_diff), np.array(bytes_diff)
    print(f"{Path(trace).name}: {len(f)} GEMM events in both; FLOPs within 2%: {(f <= 0.02).sum()}/{len(f)}, "
          f"max FLOPs difference {f.max() * 100:.3f}%; bytes within 2%: {(b <= 0.02).sum()}/{len(b)}, "
          f"max bytes difference {b.max() * 100:.3f}%")
    from perftracker.analyzers.analysis import Analysis
    from perftracker.analyzers.efficiency.instances import op_instances_view
    from perftracker.collectors.loading import LoadOptions, load_path

    inst = Analysis(load_path(Path(trace), LoadOptions(cache_dir=None))).view(op_instances_view)
    family = "attention" if GEMMS == ATTENTION else "gemm"
    ours_ns = float(inst.loc[inst["family"] == family, "gpu_ns"].sum())
    theirs_ns = sum(r["kernel_us"] for r in theirs.values()) * 1e3
    print(f"  GEMM GPU time (union of each op's kernels): perftracker {ours_ns / 1e6:.3f} ms over "
          f"{int((inst['family'] == family).sum())} instances, TraceLens {theirs_ns / 1e6:.3f} ms over "
          f"{len(theirs)} kernel launchers ({abs(ours_ns - theirs_ns) / theirs_ns * 100:.2f}% apart)")


if __name__ == "__main__":
    {"tracelens": tracelens_side, "compare": compare_side}[sys.argv[1]](sys.argv[2], sys.argv[3])
