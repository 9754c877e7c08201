"""The report's "Efficiency" section: MFU per rank and step, the roofline, the least efficient ops.

`efficiency_section(tables, findings)` is None without `op_efficiency` rows or GPU time; otherwise it lays out
`step_mfu`, `op_efficiency` and `device_peaks` (at most TOP_ROWS rows per table).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.analyzers.findings import Finding
from perftracker.reports.efficiency_charts import roofline_chart
from perftracker.reports.evidence import measured, number
from perftracker.reports.sections import Section, Tables, grid, table

TEMPLATE = "section_efficiency.html.j2"
TOP_ROWS = 20


def _mfu_rows(mfu: pd.DataFrame) -> dict[str, Any]:
    shown = pd.DataFrame({
        "rank": mfu["rank"], "step": mfu["step"].map(lambda s: "window" if int(s) < 0 else str(int(s))),
        "device": mfu["device"].replace("", "unknown"), "dtype": mfu["dtype"],
        "tflops": mfu["model_flops"].map(lambda f: measured(f, 1e12)), "step_ms": mfu["step_ns"].map(lambda n: measured(n, 1e6)),
        "achieved": mfu["tflops"].map(measured), "mfu": mfu["mfu"].map(lambda m: measured(100.0 * m))})
    return grid(shown, {"rank": "rank", "step": "step", "device": "device", "dtype": "dtype", "tflops": "model TFLOP",
                        "step_ms": "step ms", "achieved": "TFLOPS", "mfu": "MFU %"}, TOP_ROWS, "step_mfu")


def _ops_rows(ops: pd.DataFrame) -> dict[str, Any]:
    modelled = ops[ops["family"] != "no model"].head(TOP_ROWS)
    shown = pd.DataFrame({
        "op": modelled["op"], "shape": modelled["shape"], "dtype": modelled["dtype"], "count": modelled["count"],
        "gpu_ms": modelled["gpu_ns"].map(lambda n: measured(n, 1e6)), "tflops": modelled["tflops"].where(modelled["flops"] > 0).map(measured),
        "tbps": modelled["tbps"].map(measured), "bound": modelled["bound"].replace("", "-"),
        "pct": modelled["pct_of_peak"].map(measured), "lost": modelled["lost_ns"].map(lambda n: measured(n, 1e6))})
    return grid(shown, {"op": "op", "shape": "shape", "dtype": "dtype", "count": "count", "gpu_ms": "GPU ms",
                        "tflops": "TFLOPS", "tbps": "TB/s", "bound": "bound", "pct": "% of roof",
                        "lost": "ms lost vs roof"}, TOP_ROWS, "op_efficiency",
                total=int((ops["family"] != "no model").sum()))


def _unmodelled(ops: pd.DataFrame) -> dict[str, Any]:
    none = ops[ops["family"] == "no model"].sort_values("gpu_ns", ascending=False)
    shown = pd.DataFrame({"op": none["op"], "kernels": none["count"], "gpu_ms": none["gpu_ns"].map(lambda n: measured(n, 1e6))})
    return grid(shown, {"op": "op (launching the kernels)", "kernels": "kernels", "gpu_ms": "GPU ms"}, 10,
                "op_efficiency", total=len(none))


def efficiency_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """MFU, the roofline and the least efficient ops (see the module docstring)."""
    ops = table(tables, "op_efficiency")
    if ops.empty or not (ops["family"] != "no model").any():
        return None
    peaks = table(tables, "device_peaks")
    unknown = sorted(set(peaks.loc[~peaks["known"].astype(bool), "trace_name"].astype(str))) if len(peaks) else []
    modelled_ns = float(ops.loc[ops["family"] != "no model", "gpu_ns"].sum())
    other_ns = float(ops.loc[ops["family"] == "no model", "gpu_ns"].sum())
    if modelled_ns + other_ns <= 0:
        return None  # no GPU time (a CPU-only run): rates against a GPU's roofs would be a table of dashes
    data = {
        "mfu": _mfu_rows(table(tables, "step_mfu")), "ops": _ops_rows(ops), "unmodelled": _unmodelled(ops),
        "unknown": [name or "no device name in the trace" for name in unknown],
        "devices": [f"{r['device']}: {r['source']}" for _, r in peaks[peaks["known"].astype(bool)].iterrows()]
        if len(peaks) else [],
        "coverage": number(100.0 * modelled_ns / (modelled_ns + other_ns)) if modelled_ns + other_ns > 0 else "-",
    }
    figure = roofline_chart(ops[ops["family"] != "no model"], peaks)
    return Section(key="efficiency", title="Efficiency", template=TEMPLATE, data=data,
                   figures=[figure] if figure else [])
