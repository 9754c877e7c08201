"""Post-mortems: each fixture scenario names the culprit rank(s)/host(s); the pickle walker refuses
code references; the `postmortem` command writes the summary and Prometheus file. A fresh real gloo job stalled
until its timeout is in tests/live/attach/test_run.py; its recorded twin is fixtures/postmortem/gloo-timeout-lost-peer."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.crash import analyze_crash
from perftracker.analyzers.findings import Finding, Severity
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.postmortem.flight_recorder import UnsafePickle, load_fr_dumps, plain_unpickle
from perftracker.store import Store

from .frgen import hang_dumps

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "postmortem"
REPO = Path(__file__).resolve().parents[2]


def scenario(name: str, tmp_path: Path) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run)
    if name == "fr_hang":  # rank 2's dump as the pickle _dump_fr_trace() writes
        (run / "fr" / "nccl_trace_rank_2").write_bytes(pickle.dumps(hang_dumps()[2]))
    return run


def load(run: Path, tmp_path: Path) -> Store:
    return load_path(run, LoadOptions(cache_dir=None, workers=1))


def crash_findings(name: str, tmp_path: Path) -> list[Finding]:
    found = analyze_crash(Analysis(load(scenario(name, tmp_path), tmp_path)))
    assert all(f.severity == Severity.CRITICAL for f in found)
    return found


def test_nccl_watchdog_timeouts_name_the_rank_missing_from_the_collective(tmp_path: Path) -> None:
    # GIVEN a 4-rank job log where ranks 0, 1, 3 time out in ALLREDUCE SeqNum 1234 and rank 2 does not
    # WHEN the crash analyzer reads it
    found = crash_findings("nccl_timeout", tmp_path)
    # THEN one finding names rank 2 on gpu-node-b, the op, sequence number, group and size
    assert len(found) == 1
    f = found[0]
    assert f.ranks == (2,) and f.hosts == ("gpu-node-b",)
    assert "ALLREDUCE SeqNum 1234 (pg 0, 25165824 elements)" in f.title and "ranks 0, 1, 3 timed out" in f.title
    assert f.evidence["timed_out_ranks"] == [0, 1, 3]
    # AND torchrun's SIGABRT "root cause" (a timeout symptom) is not reported as the first failure
    assert not any("failed first" in x.title for x in found)


def test_flight_recorder_hang_names_the_rank_that_never_entered(tmp_path: Path) -> None:
    # GIVEN NCCL FR dumps (JSON for ranks 0, 1, 3; a pickle for rank 2) where rank 2 stopped after #1233
    found = crash_findings("fr_hang", tmp_path)
    # THEN rank 2 is the culprit, with the collective the others wait in
    assert len(found) == 1
    f = found[0]
    assert f.ranks == (2,)
    assert f.title.startswith("Rank 2 never entered pg 0 default_pg #1234 (nccl:all_reduce)")
    assert f.title.endswith("3 ranks in 1 process group wait behind it")
    assert f.evidence["waiting_behind"] == [0, 1, 3]
    assert f.evidence["consequences"][0]["waiting_ranks"] == [0, 1, 3]
    assert f.evidence["last_entered"]["2"] == "last entered pg 0 default_pg #1233 (nccl:all_reduce)"


def test_flight_recorder_mismatch_names_the_odd_rank(tmp_path: Path) -> None:
    found = crash_findings("fr_mismatch", tmp_path)
    assert len(found) == 1
    f = found[0]
    assert f.ranks == (1,) and f.evidence["seq"] == 7
    assert "rank 1 ran nccl:broadcast [[10]]" in f.title and "ranks 0, 2, 3 ran nccl:all_reduce" in f.title


def test_first_failure_from_traceback_table_and_error_file(tmp_path: Path) -> None:
    # GIVEN a torchrun log with rank 5's OOM traceback, its ChildFailedError table and rank 5's error file
    store = load(scenario("child_failed", tmp_path), tmp_path)
    found = analyze_crash(Analysis(store))
    # THEN rank 5 on gpu-node-c failed first, with its error
    assert len(found) == 1
    f = found[0]
    assert f.ranks == (5,) and f.hosts == ("gpu-node-c",) and "CUDA out of memory" in f.title
    # AND the error file (named in the table) was read as rank 5's, not taken for a trace
    errors = store["failures"]
    assert (errors["file"].str.endswith("error.json") & (errors["rank"] == 5)).any()
    assert store.events.empty


def test_xid_line_names_the_host(tmp_path: Path) -> None:
    found = crash_findings("xid", tmp_path)
    assert len(found) == 1 and found[0].hosts == ("gpu-node-d",) and "Xid 79" in found[0].title


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("never printed",))  # a harmless stand-in for os.system


def test_pickle_walker_refuses_code_references_and_loads_plain_data(tmp_path: Path) -> None:
    # GIVEN a pickle whose data holds a callable reference (GLOBAL + REDUCE), built without running it
    evil = pickle.dumps({"entries": [_Evil()]})
    # WHEN it is walked THEN it is refused
    with pytest.raises(UnsafePickle, match="code references"):
        plain_unpickle(evil)
    with pytest.raises(UnsafePickle):
        plain_unpickle(pickle.dumps(print, protocol=2))
    # AND a dump file holding it becomes an error note, not rows
    (tmp_path / "rank_0").write_bytes(evil)
    frame, _, notes = load_fr_dumps([tmp_path / "rank_0"])
    assert frame.empty and notes[0].level == "error" and "not loaded" in notes[0].message
    # AND plain data of every protocol comes back equal
    plain = {"a": [1, 2.5, None, True], "b": ("x", b"y"), "c": {"n": -(1 << 70)}, "d": [[1], [1]]}
    for proto in range(3, pickle.HIGHEST_PROTOCOL + 1):  # protocol 2 pickles bytes via a GLOBAL
        assert plain_unpickle(pickle.dumps(plain, protocol=proto)) == plain


def test_postmortem_command_writes_summary_and_prometheus(tmp_path: Path) -> None:
    from perftracker.cli import postmortem
    from perftracker.cli.voice import add_command

    app = typer.Typer()
    add_command(app, "postmortem", postmortem.postmortem)

    @app.callback()
    def _root() -> None:
        """root"""

    run = scenario("nccl_timeout", tmp_path)
    out, summary, prom = tmp_path / "out", tmp_path / "summary.txt", tmp_path / "metrics.prom"
    result = CliRunner().invoke(app, ["postmortem", str(run), "-o", str(out), "--summary", str(summary),
                                      "--prom", str(prom), "--fail-on", "critical"])
    assert result.exit_code == 3, result.output
    assert "Rank 2 on gpu-node-b never joined" in result.output and "report.html" in result.output
    text = summary.read_text()
    assert text.splitlines()[1].startswith("input:") and "1. [CRITICAL] Rank 2" in text
    metrics = prom.read_text()
    assert "# TYPE perftracker_findings gauge" in metrics and 'perftracker_findings{severity="critical"} 1' in metrics
    for line in metrics.splitlines():
        assert line.startswith("#") or len(line.split(" ")) == 2
    document = json.loads((out / "findings.json").read_text())
    assert any(f["analyzer"] == "crash" and f["ranks"] == [2] for f in document["findings"])
    # AND without --fail-on it exits 0
    assert CliRunner().invoke(app, ["postmortem", str(run), "-o", str(out)]).exit_code == 0


def test_a_rank_that_lost_its_peers_inside_the_collective_is_not_the_missing_one(tmp_path: Path) -> None:
    # GIVEN the output of a real 4-rank gloo run (rank 2 hangs before step 3's all_reduce, pg timeout 6 s) in which ranks 1
    # and 3 timed out first and rank 0, still inside the all_reduce, saw "Connection closed by peer" instead
    run = tmp_path / "run"
    shutil.copytree(REPO / "tests" / "fixtures" / "postmortem" / "gloo-timeout-lost-peer", run)
    # WHEN postmortem reads it
    found = analyze_crash(Analysis(load(run, tmp_path)))
    # THEN only rank 2 is named as never joining, with rank 0 as a rank that lost its peers, not a missing one
    missing = [f for f in found if "never joined" in f.title]
    assert [f.ranks for f in missing] == [(2,)]
    assert missing[0].evidence["timed_out_ranks"] == [1, 3] and missing[0].evidence["lost_peer_ranks"] == [0]
    assert "rank 0 then lost its peers" in missing[0].title


def test_a_rank_that_raised_is_first_even_when_a_peer_reported_its_loss_earlier() -> None:
    # GIVEN rank 1 raised its own error, rank 0 reported the closed connection a moment before it, and the
    # launcher then sent rank 1 (still printing its traceback) SIGTERM: as a real run on a loaded machine showed
    def row(rank: int, kind: str, ts: int, message: str, line: int) -> dict[str, object]:
        return {"rank": rank, "host": "vm", "kind": kind, "ts_ns": ts, "pg": "", "seq": -1, "op": "", "numel": -1,
                "message": message, "file": "launcher.stderr.log", "line": line}
    store = Store()
    store.set_table("failures", pd.DataFrame([
        row(0, "exception", 1_000, "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:2455.", 15),
        row(1, "exception", 2_000, "RuntimeError: sample_job: rank 1 failed on purpose at step 5", 30),
        row(1, "exit", 3_000, "Signal 15 (SIGTERM) received by PID 12069", 40),
    ]))
    # WHEN the crash rules judge it
    found = [f for f in analyze_crash(Analysis(store)) if f.key.startswith("crash:first")]
    # THEN the rank with an error of its own is named first, the lost-peer report after it
    assert len(found) == 1 and found[0].ranks == (1,), [f.title for f in found]
    assert "failed on purpose" in found[0].title and found[0].evidence["failed_ranks_in_order"] == [1, 0]
