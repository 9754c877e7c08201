"""NCCL RAS client output (text, JSON, monitor mode) read and judged: dead and missing ranks as failure evidence.

Real inputs: the examples of NCCL's own RAS documentation (NVIDIA/nccl docs/userguide/source/troubleshooting/ras.rst
at 5067397c, tests/fixtures/nccl_public/PROVENANCE.md), printed by the RAS client of NCCL 2.24-2.29.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.nccl.config import analyze_nccl_config, flags
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.nccl.ras import is_ras_file, load_ras
from perftracker.store import Store

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_public"


def _judge(name: str) -> list:  # type: ignore[type-arg]
    tables, notes = load_ras([PUBLIC / name])
    assert not notes
    return analyze_nccl_config(Analysis(Store(tables=dict(tables))))


@pytest.mark.parametrize(("name", "flag", "severity", "names"), [
    ("ras_text_dead.txt", "ras_dead", Severity.CRITICAL, "process 3487984 on 172.16.64.213 (GPU 5)"),
    ("ras_monitor.txt", "ras_dead", Severity.CRITICAL, "process 1524345 on 172.16.64.245 (GPU 1)"),
    ("ras_text_incomplete.txt", "ras_missing", Severity.WARNING, "process 3487984 on 172.16.64.213 (GPU 5)"),
    ("ras_comms.json", "ras_missing", Severity.WARNING, "process 1524345 on 172.16.64.245 (GPU 1)"),
    ("ras_text_mismatch.txt", "ras_mismatch", Severity.INFO, "1 communicator"),
])
def test_each_ras_output_gives_one_finding(name: str, flag: str, severity: Severity, names: str) -> None:
    # GIVEN one RAS output of NCCL's documentation WHEN read and judged
    findings = _judge(name)
    # THEN one finding of its kind names the process (host, pid, GPU) at its severity
    assert is_ras_file(PUBLIC / name)
    assert flags(findings) == {flag}, [f.title for f in findings]
    assert findings[0].severity == severity and names in findings[0].title


def test_dead_process_folds_the_missing_rank() -> None:
    # GIVEN the DEAD report, which also lists communicator cf264af53edbe986's missing rank 21
    tables, _ = load_ras([PUBLIC / "ras_text_dead.txt"])
    rows = tables["nccl_ras"]
    assert set(rows["kind"]) == {"dead", "missing_rank"}
    assert rows.loc[rows["kind"] == "missing_rank", "comm"].tolist() == ["0xcf264af53edbe986"]
    # WHEN judged THEN the missing rank is the dead process's evidence, not a second finding
    (finding,) = _judge("ras_text_dead.txt")
    assert finding.evidence["missing_ranks"] == ["0xcf264af53edbe986 rank 21"]


def test_a_folder_with_ras_output_is_analysable(tmp_path: Path) -> None:
    # GIVEN a folder holding only the RAS client's answer WHEN loaded THEN its table fills (the input kind reads it)
    shutil.copy(PUBLIC / "ras_text_incomplete.txt", tmp_path / "ncclras.out")
    store = load_path(tmp_path, LoadOptions())
    assert set(store["nccl_ras"]["kind"]) == {"comm_group", "missing_process", "missing_rank", "timeout"}



def test_ras_json_named_like_a_trace_is_read_as_ras(tmp_path: Path) -> None:
    # GIVEN a run folder with the RAS client's JSON saved as `ncclras.json` (named like a Kineto trace) and a
    # step-less folder otherwise
    shutil.copy(PUBLIC / "ras_comms.json", tmp_path / "ncclras.json")
    # WHEN loaded
    store = load_path(tmp_path, LoadOptions())
    # THEN the RAS kind reads it by content (it is not offered to the Kineto trace kind, which would reject it)
    rows = store["nccl_ras"]
    assert not rows.empty and "missing_rank" in set(rows["kind"])

def test_hostile_text_neither_raises_nor_invents_rows(tmp_path: Path) -> None:
    # GIVEN files that look like RAS / nccl-tests output but are garbage: binary bytes, huge lines, bad JSON
    from perftracker.collectors.nccl.nccl_tests import load_nccl_tests

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Group     Comms busbw algbw\n" + bytes(range(256)) * 64 + b"\n" + b"9" * 200_000 + b"\n"
                    + b"#0-0 (zz) INCOMPLETE\n  Rank x -- GPU\n{\"communicators\": [1, {\"missing_ranks\": [\"x\"]}]\n")
    js = tmp_path / "bad.json"
    js.write_text('{"communicators": [{"hash": 1, "missing_ranks": [{"rank": "not a number"}]}], "missing_ranks": 1}')
    # WHEN loaded THEN no exception, no rows made up from them (a bad JSON record is dropped, not guessed)
    ras, _ = load_ras([bad, js])
    tests, _ = load_nccl_tests([bad])
    assert set(ras["nccl_ras"]["kind"]) <= {"comm_group"} and tests["nccl_tests"].empty


def _hang_with_ras(tmp_path: Path, pid: int) -> Path:
    """The real 8-rank gloo hang of tests/fixtures/fr_gloo/gil (rank 5 stuck holding the GIL: the wait-for graph's
    only root; its stacks give rank 5 pid 23262 on host `vm`) with an NCCL RAS answer beside it: the documentation's
    `ras_text_dead.txt` with its dead process's pid and node replaced by `pid` on `vm` (constructed: RAS is NCCL's,
    the recorded job ran gloo)."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "fr_gloo" / "gil", run)
    text = (PUBLIC / "ras_text_dead.txt").read_text().replace("3487984", str(pid)).replace("172.16.64.213", "vm")
    (run / "ncclras.out").write_text(text)
    return run


def test_ras_dead_process_joins_the_wait_for_root(tmp_path: Path) -> None:
    from perftracker.pipeline import findings_of

    # GIVEN the hang whose wait-for root is rank 5, and RAS saying rank 5's process (pid 23262 on vm) is dead
    findings = findings_of(Analysis(load_path(_hang_with_ras(tmp_path, 23262), LoadOptions())))
    # THEN one critical finding names the root (the flight-recorder's), and the RAS finding is its context, joined
    # to rank 5: one cause, one finding
    ras = [f for f in findings if "ras_dead" in flags([f])]
    assert len(ras) == 1 and ras[0].severity == Severity.INFO and ras[0].ranks == (5,), [f.title for f in findings]
    assert ras[0].evidence["wait_for_root_ranks"] == [5]
    roots = [f for f in findings if f.key.startswith("crash:root:") and f.severity == Severity.CRITICAL]
    assert len(roots) == 1 and roots[0].ranks == (5,)


def test_ras_dead_process_of_another_pid_stays_a_cause(tmp_path: Path) -> None:
    from perftracker.pipeline import findings_of

    # GIVEN the same hang, but RAS names a process the job's tables do not give any rank (pid 999999 on `vm`,
    # a host that also holds ranks the root does not include)
    findings = findings_of(Analysis(load_path(_hang_with_ras(tmp_path, 999999), LoadOptions())))
    # THEN RAS's dead process is not folded into rank 5's root: it stays critical
    ras = [f for f in findings if "ras_dead" in flags([f])]
    assert len(ras) == 1 and ras[0].severity == Severity.CRITICAL
