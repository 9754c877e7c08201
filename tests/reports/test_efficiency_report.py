"""The efficiency tables and the report's Efficiency section, end to end on a real trace with shapes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from api_helpers import analyzed

from perftracker.reports.efficiency_section import efficiency_section

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
REQUIRED = ["op", "shape", "dtype", "count", "flops", "bytes", "gpu_ns", "tflops", "tbps", "intensity", "peak_tflops",
            "pct_of_peak", "bound"]


def test_tables_and_section_on_a_real_trace(tmp_path: Path) -> None:
    # GIVEN BERT-small inference on an H100 with record_shapes; WHEN analyzed into a folder
    analyzed(TRACE, tmp_path, cache=False)
    ops = pd.read_parquet(tmp_path / "tables" / "op_efficiency.parquet")
    mfu = pd.read_parquet(tmp_path / "tables" / "step_mfu.parquet")
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    # THEN the tables hold the columns, MFU per rank and step, and the page has the section and its roofline
    assert set(REQUIRED) <= set(ops.columns) and {"rank", "step", "model_flops", "step_ns", "mfu"} <= set(mfu.columns)
    assert (ops["op"] == "aten::linear").any() and ops.loc[ops["family"] == "gemm", "pct_of_peak"].between(0, 100).all()
    assert len(mfu) == 1 and 0 < float(mfu["mfu"].iloc[0]) < 1
    assert 'id="efficiency"' in html and "Roofline" in html


def test_no_section_without_shapes() -> None:
    # GIVEN tables of a run whose traces carry no op shapes; THEN the section is left out
    assert efficiency_section({"op_efficiency": pd.DataFrame()}, []) is None
