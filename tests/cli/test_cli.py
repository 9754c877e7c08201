"""The analyze / report / demo commands end to end, as a user runs them (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from tests.reports.test_report_views import sections_of

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_traces" / "ddp-gloo-4rank-slow-rank2"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perftracker", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_help_and_version() -> None:
    assert run("--version").stdout.strip().startswith("perftracker ")
    out = run("--help").stdout
    for command in ("analyze", "report", "demo"):
        assert command in out
    assert "--fail-on" in run("analyze", "--help").stdout


def test_version_imports_neither_pandas_nor_a_command() -> None:
    # GIVEN the command line; WHEN `perftracker --version` runs in a fresh interpreter
    code = ("import sys\nfrom perftracker.cli import main\nsys.argv = ['perftracker', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'perftracker.store', 'perftracker.cli.analyze') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    # THEN it prints the version, and neither pandas, the Store nor a command's module was imported
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("perftracker ") and lines[1] == "[]", out.stdout + out.stderr


def test_analyze_real_traces_writes_report_findings_and_tables(hta_traces: Path, tmp_path: Path) -> None:
    # GIVEN the real 2-rank GPU traces
    # WHEN analyzed
    result = run("analyze", str(hta_traces / "trace_filter"), "-o", str(tmp_path / "out"), "--no-cache")
    # THEN it exits 0, prints a verdict and the report path, and writes the outputs
    assert result.returncode == 0, result.stderr
    assert "Verdict:" in result.stdout and "report.html" in result.stdout
    doc = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert doc["schema_version"] == 1
    assert doc["summary"]["ranks"] == 2
    for f in doc["findings"]:
        assert set(f) >= {"id", "analyzer", "severity", "title", "ranks", "hosts", "evidence", "cost",
                          "recommendation", "related"}
        assert set(f["cost"]) == {"seconds_per_step", "share_of_step"}
    order = {"critical": 2, "warning": 1, "info": 0}
    keys = [(order[f["severity"]], f["cost"]["seconds_per_step"]) for f in doc["findings"]]
    assert keys == sorted(keys, reverse=True)  # severity first, then cost
    assert any(f["analyzer"] == "overlap" for f in doc["findings"])
    assert (tmp_path / "out" / "tables" / "breakdown.parquet").exists()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Plotly.newPlot" in html and "<script src=" not in html  # plotly.js is inlined
    # AND the report has the kernels and ops, and each finding's evidence as a table
    assert (tmp_path / "out" / "tables" / "kernels.parquet").exists() and '<section id="kernels">' in html
    assert html.count('<details class="evidence">') == len(doc["findings"])


def test_fail_on_sets_exit_code_three(hta_traces: Path, tmp_path: Path) -> None:
    # (its exposed communication was critical while it counted the waiting for the late rank: 160 ms; the
    # transfer alone, 98 ms, is a warning since issue 26)
    result = run("analyze", str(hta_traces / "trace_filter"), "-o", str(tmp_path / "o"), "--fail-on", "warning")
    assert result.returncode == 3
    assert run("analyze", str(hta_traces / "trace_filter"), "-o", str(tmp_path / "o3"), "--fail-on",
               "critical").returncode == 0
    clean = TraceBuilder(rank=0).step(1, 0, 1000).kernel("gemm", 0, 990, launch_ts=0).write(tmp_path / "c" / "r.json")
    assert run("analyze", str(clean.parent), "-o", str(tmp_path / "o2"), "--fail-on", "warning").returncode == 0


def test_bad_input_is_one_line_and_exit_two(tmp_path: Path) -> None:
    (tmp_path / "rank-0.json").write_text("not json at all")
    for args in (["analyze", str(tmp_path / "missing")], ["analyze", str(tmp_path)],
                 ["analyze", str(tmp_path), "--fail-on", "sometimes"], ["report", str(tmp_path)]):
        result = run(*args, "-o", str(tmp_path / "o")) if args[0] == "analyze" else run(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("perftracker: ")


def test_report_rerenders_without_the_raw_traces(hta_traces: Path, tmp_path: Path) -> None:
    import shutil

    traces = tmp_path / "traces"
    shutil.copytree(hta_traces / "trace_filter", traces)
    assert run("analyze", str(traces), "-o", str(tmp_path / "out")).returncode in (0,)
    analyzed = sections_of(tmp_path / "out" / "report.html")
    shutil.rmtree(traces)
    (tmp_path / "out" / "report.html").unlink()
    result = run("report", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "Communication is exposed" in (tmp_path / "out" / "report.html").read_text()
    # every section of the analyzed report comes back, drawn from tables/ (no stored HTML there)
    assert sections_of(tmp_path / "out" / "report.html") == analyzed
    assert {"breakdown", "overlap", "timeline"} <= {key for key, _, _ in analyzed}
    assert not (tmp_path / "out" / "tables" / "sections.json").exists()


def test_trace_content_is_escaped_in_the_report(tmp_path: Path) -> None:
    # GIVEN a trace whose kernel name carries markup
    evil = "<script>alert('x')</script><img src=x onerror=alert(1)>"
    b = TraceBuilder(rank=0)
    for n, t0 in ((1, 0), (2, 1000)):
        b.step(n, t0, 1000).kernel(evil, t0 + 10, 100, launch_ts=t0 + 1).kernel(
            "ncclKernel_x" + evil, t0 + 200, 700, launch_ts=t0 + 2)
    b.write(tmp_path / "t" / "rank-0.json")
    assert run("analyze", str(tmp_path / "t"), "-o", str(tmp_path / "out")).returncode == 0
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<script>alert(" not in html and "<img src=x" not in html


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample_traces not present")
def test_demo_on_sample_traces_names_the_slowed_rank(tmp_path: Path) -> None:
    # GIVEN the bundled real 4-rank torchrun job with rank 2 slowed by extra forward compute
    result = run("demo", "-o", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "demo" / SAMPLE.name / "findings.json").read_text())
    warnings = [f for f in doc["findings"] if f["severity"] != "info"]
    # THEN the top finding names rank 2, and the step files' host is known
    assert warnings and warnings[0]["ranks"] == [2]
    assert doc["summary"]["ranks"] == 4
    # AND the synthetic GPU sample is analyzed too: its straggler is rank 2, and the terminal marks the
    # synthetic samples (it and the NCCL one) as such, the real ones not
    gpu = json.loads((tmp_path / "demo" / "synthetic-gpu-4rank-thermal" / "findings.json").read_text())
    assert [f["ranks"] for f in gpu["findings"] if f["analyzer"] == "straggler" and f["severity"] != "info"] == [[2]]
    assert "synthetic_inputs" in gpu["summary"] and "synthetic_inputs" not in doc["summary"]
    assert result.stdout.count("Synthetic inputs") == 2
    # AND one line per sample, and an index page linking every sample's report
    assert len(result.stdout.strip().splitlines()) == len([p for p in SAMPLE.parent.iterdir() if p.is_dir()]) + 1
    index = (tmp_path / "demo" / "index.html").read_text()
    assert all(f'href="{p.name}/report.html"' in index for p in SAMPLE.parent.iterdir() if p.is_dir())
