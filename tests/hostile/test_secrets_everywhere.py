"""Round three: one redaction for everything written. Secrets planted into the names of ops (record_function)
and kernels of Kineto traces, into NCCL WARN lines and job-log lines (a PEM private key, a `ghp_` token,
`password=`, URL credentials), plus an ESC byte, are greped for in every output file: findings.json, report.html,
tables/*.parquet decoded, the timeline, diff.json and diff.html, and the terminal. None survives."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.redaction import safe_frame, safe_text

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq9Zx3kQwErTy\nUiOpAsDfGhJkLzXcVbNm1234\n"
       "-----END RSA PRIVATE KEY-----")
PLANT = " password=hunter2 ghp_AbCdEf0123456789AbCdEf0123456789abcd https://alice:s3cretpw@h.example/x \x1b[31m"
SECRETS = ["hunter2", "ghp_AbCdEf", "s3cretpw", "MIIEpAIBAAKCAQEA", "UiOpAsDfGhJk", "\x1b", "\\u001b"]


def _planted_run(root: Path) -> Path:
    run = Path(shutil.copytree(SAMPLE, root / "run"))
    for trace in sorted((run / "traces").glob("*.json.gz")):
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        for event in doc["traceEvents"]:
            if event.get("name") in ("extra_work", "aten::addmm", "aten::mm"):
                event["name"] = event["name"] + PLANT
        trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    (run / "output").mkdir(exist_ok=True)
    (run / "output" / "launcher.stderr.log").write_text(
        f"node-1:7:7 [0] NCCL WARN NET/IB : connect failed {PLANT}\n" + f"[rank1]: RuntimeError: ssl failed {PEM}\n"
        + "\n".join(f"[rank1]: {line}" for line in PEM.splitlines()) + "\n", encoding="utf-8")
    return run


def _text_of(path: Path) -> str:
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return frame.to_csv() + " ".join(map(str, frame.columns))
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("secrets")
    run = _planted_run(root)
    runner = CliRunner()
    first = runner.invoke(app, ["analyze", str(run), "-o", str(root / "out"), "--timeline", "--no-cache"],
                          terminal_width=300)
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, ["diff", str(SAMPLE), str(run), "-o", str(root / "diff"), "--no-cache",
                                 "--allow-different-jobs"], terminal_width=300)
    assert second.exit_code in (0, 3), second.output
    return root, first.output + second.output


def test_no_planted_secret_reaches_any_output_file(outputs: tuple[Path, str]) -> None:
    root, terminal = outputs
    # GIVEN the planted run analyzed (with its timeline) and compared with the clean one
    files = [p for folder in ("out", "diff") for p in (root / folder).rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and any(p.name == "timeline.json.gz" for p in files)
    assert any(p.name == "diff.html" for p in files)
    # THEN no secret and no ESC byte is in any of them, nor in the terminal
    leaks = {str(p.relative_to(root)): [s for s in SECRETS if s in _text_of(p)] for p in files}
    assert {k: v for k, v in leaks.items() if v} == {}
    assert [s for s in SECRETS if s in terminal] == []
    # AND the names are still there, their secrets hidden
    ops = pd.read_parquet(root / "out" / "tables" / "op_totals.parquet")
    assert ops.astype(str).apply(lambda c: c.str.contains("extra_work password=<redacted>")).any().any()


def test_safe_frame_redacts_each_distinct_string_once_and_keeps_the_rest() -> None:
    # GIVEN a table of a million rows of two names, one with a secret, a categorical column and numbers
    frame = pd.DataFrame({"name": ["aten::mm", f"k{PLANT}"] * 500_000, "n": range(1_000_000)})
    frame["cat"] = frame["name"].astype("category")
    # WHEN made safe THEN both columns are redacted, the numbers as they were; a clean frame is returned as is
    safe = safe_frame(frame)
    assert set(safe["name"]) == {"aten::mm", safe_text(f"k{PLANT}")} and "hunter2" not in str(set(safe["cat"]))
    assert safe["n"].equals(frame["n"])
    clean = pd.DataFrame({"name": ["aten::mm"]})
    assert safe_frame(clean) is clean
    assert io.StringIO(safe.head().to_csv()).read().count("<redacted>") > 0


STALL = Path(__file__).resolve().parents[2] / "sample_traces" / "gloo-4rank-stall-rank2"


def test_control_bytes_of_folder_and_host_names_reach_no_output(tmp_path: Path) -> None:
    # GIVEN a run in a folder whose name holds ESC sequences, whose manifests name the host with one too
    run = Path(shutil.copytree(STALL, tmp_path / "run\x1b[31m\x1b]0;title\x07"))
    for manifest in (run / "manifest.json", *(run / "manifests").glob("*.json")):
        manifest.write_text(manifest.read_text().replace('"vm"', '"vm\\u001b[2Jevil"'))
    # WHEN analyzed, and compared with itself
    runner = CliRunner()
    first = runner.invoke(app, ["analyze", str(run), "-o", str(tmp_path / "out"), "--no-cache"])
    second = runner.invoke(app, ["diff", str(tmp_path / "out"), str(tmp_path / "out"), "-o", str(tmp_path / "d")])
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    # THEN no control byte (raw or JSON-escaped) is in report.html, findings.json, diff.html or diff.json
    for path in (tmp_path / "out" / "report.html", tmp_path / "out" / "findings.json", tmp_path / "d" / "diff.html",
                 tmp_path / "d" / "diff.json"):
        text = path.read_text(encoding="utf-8")
        assert "\x1b" not in text and "\\u001b" not in text and "\x07" not in text, path.name
    assert "\x1b" not in first.output + second.output


def test_secrets_in_flight_recorder_op_names_reach_no_output(tmp_path: Path) -> None:
    # GIVEN flight-recorder dumps whose op names and process-group names carry planted secrets
    import pickle

    from postmortem.frgen import entry

    run = tmp_path / "run"
    run.mkdir()
    for rank in range(4):
        entries = [entry(5, op=f"nccl:all_reduce{PLANT}", pg="10", desc=f"GROUP{PLANT}", state="started")]
        body = {"version": "2.10", "rank": rank, "entries": entries if rank != 3 else [],
                "pg_config": {"10": {"name": "10", "desc": f"GROUP{PLANT}", "ranks": "[0, 1, 2, 3]"}},
                "pg_status": {"10": {"last_enqueued_collective": 5 if rank != 3 else 4, "last_started_collective": -1,
                                     "last_completed_collective": 4}}}
        (run / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(body))
    # WHEN analyzed THEN the hang is found, and no output file holds a secret
    result = CliRunner().invoke(app, ["postmortem", str(run), "-o", str(tmp_path / "out")], terminal_width=300)
    assert result.exit_code == 0, result.output
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert {str(p.name): [s for s in SECRETS if s in _text_of(p)] for p in files if any(
        s in _text_of(p) for s in SECRETS)} == {}
    assert [s for s in SECRETS if s in result.output] == []
    assert "Rank 3" in result.output


def test_secrets_in_nsight_kernel_names_and_nvtx_ranges_reach_no_output(tmp_path: Path) -> None:
    # GIVEN a real Nsight Systems export whose every string (kernel names, NVTX ranges) carries planted secrets
    import sqlite3

    from nsys_fixtures import SAXPY, real_export

    export = real_export(SAXPY, tmp_path / "run", "rank_0.sqlite")
    conn = sqlite3.connect(export)
    conn.execute("UPDATE StringIds SET value = value || ?", (PLANT,))
    conn.commit()
    conn.close()
    # WHEN analyzed with its timeline
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "--timeline",
                                      "--no-cache"], terminal_width=300)
    assert result.exit_code in (0, 3), result.output
    # THEN no output file, parquet decoded, holds a secret or an ESC byte
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert any(p.name == "kernels.parquet" for p in files)
    assert "password=<redacted>" in _text_of(tmp_path / "out" / "tables" / "kernels.parquet")  # names kept, hidden
    assert {p.name: [s for s in SECRETS if s in _text_of(p)] for p in files
            if any(s in _text_of(p) for s in SECRETS)} == {}
    assert [s for s in SECRETS if s in result.output] == []
