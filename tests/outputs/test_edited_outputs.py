"""No exit 70 from any file a user can edit: findings.json read back by `report` and `diff` is checked
field by field and read within bounds; a lint-env profile or env file of any content is an answer or a
clear refusal. The probe's inputs rebuilt: `ranks: [Infinity]`, wrong types, evidence nested 3,000 deep,
10^5 findings, a FIFO and a /dev/zero link as findings.json, the steps-only sample diffed against a run
with traces, a profile that is not UTF-8 or whose name holds rich markup, an env file past the cap."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.collectors import env as env_module
from perftracker.reports.json_report import MAX_FINDINGS

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("edited") / "out"
    result = CliRunner().invoke(app, ["analyze", str(SAMPLES / "ddp-gloo-4rank-slow-rank2"), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def _edited(analyzed: Path, tmp_path: Path, edit: Any) -> Path:
    out = Path(shutil.copytree(analyzed, tmp_path / "out"))
    (out / ".perftracker-output").unlink(missing_ok=True)
    document = json.loads((out / "findings.json").read_text(encoding="utf-8"))
    edit(document)
    (out / "findings.json").write_text(json.dumps(document), encoding="utf-8")
    return out


def _set_first(key: str, value: Any) -> Any:
    def edit(document: dict[str, Any]) -> None:
        document["findings"][0][key] = value
    return edit


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("name, edit", [
    ("ranks Infinity", _set_first("ranks", [float("inf")])),
    ("ranks text", _set_first("ranks", ["x"])),
    ("title a number", _set_first("title", 7)),
    ("severity unknown", _set_first("severity", "fatal")),
    ("cost NaN", _set_first("cost", {"seconds_per_step": float("nan")})),
    ("confidence 5", _set_first("confidence", 5)),
    ("evidence a list", _set_first("evidence", [1])),
    ("evidence 900 deep", _set_first("evidence", _deep(900))),
    ("findings an object", lambda d: d.update(findings={"a": 1})),
    ("notes of numbers", lambda d: d.update(notes=[1, 2])),
    ("coverage a number", lambda d: d["summary"].update(coverage=5)),
])
def test_report_on_an_edited_findings_json_answers_without_a_crash(analyzed: Path, tmp_path: Path, name: str,
                                                                   edit: Any) -> None:
    out = _edited(analyzed, tmp_path, edit)
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code in (0, 2), f"{name}: {result.output}"
    assert "internal error" not in result.output


def test_evidence_nested_3000_deep_is_refused_with_exit_2(analyzed: Path, tmp_path: Path) -> None:
    out = Path(shutil.copytree(analyzed, tmp_path / "out"))
    (out / "findings.json").write_text('{"schema_version": 1, "findings": [{"evidence": ' + '{"a": ' * 3000
                                       + "1" + "}" * 3000 + "}]}", encoding="utf-8")
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 2 and "nested too deeply" in result.output


def test_a_left_out_finding_is_said_in_the_report(analyzed: Path, tmp_path: Path) -> None:
    out = _edited(analyzed, tmp_path, _set_first("ranks", [float("inf")]))
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    assert "finding 1 is not one perftracker wrote (ranks are not integers" in (out / "report.html").read_text()


def test_ten_times_the_shown_findings_are_capped_and_said(analyzed: Path, tmp_path: Path) -> None:
    # GIVEN a findings.json with ten times the findings a report shows (the probe's 10^5: 50 s, 2.6 GB, a 291 MB
    # report; how long a large file takes is benchmarks' business, not a timed test's)
    many_findings = 10 * MAX_FINDINGS

    def many(document: dict[str, Any]) -> None:
        one = document["findings"][0]
        document["findings"] = [{**one, "id": f"x-{i}", "title": f"finding {i}"} for i in range(many_findings)]
    out = _edited(analyzed, tmp_path, many)
    # WHEN the report is rendered again from it
    result = CliRunner().invoke(app, ["report", str(out)])
    # THEN the report shows the first MAX_FINDINGS, says how many it left out, and stays the size of a report of
    # MAX_FINDINGS
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"{many_findings - MAX_FINDINGS:,} findings beyond the first {MAX_FINDINGS:,} are not shown" in page
    assert os.path.getsize(out / "report.html") < 60 * 1024 * 1024


def test_a_fifo_or_a_dev_zero_link_as_findings_json_is_refused_at_once(analyzed: Path, tmp_path: Path) -> None:
    for kind in ("fifo", "zero"):
        out = Path(shutil.copytree(analyzed, tmp_path / kind))
        (out / "findings.json").unlink()
        if kind == "fifo":
            os.mkfifo(out / "findings.json")
        else:
            (out / "findings.json").symlink_to("/dev/zero")
        done: list[Any] = []
        worker = threading.Thread(target=lambda o=out, d=done: d.append(CliRunner().invoke(app, ["report", str(o)])),
                                  daemon=True)
        worker.start()
        worker.join(30)
        assert done, f"report hung on a {kind} findings.json"
        assert done[0].exit_code == 2, done[0].output


def test_diff_of_the_steps_only_sample_against_a_run_with_traces(tmp_path: Path) -> None:
    # GIVEN the shipped steps-only sample and a sample with traces (the probe: TypeError in np.log, exit 70)
    result = CliRunner().invoke(app, ["diff", str(SAMPLES / "gloo-4rank-stall-rank2"),
                                      str(SAMPLES / "ddp-gloo-4rank-slow-rank2"), "-o", str(tmp_path / "d")])
    assert result.exit_code in (0, 3), result.output
    assert (tmp_path / "d" / "diff.json").is_file()


def _profile(tmp_path: Path, raw: bytes) -> Path:
    path = tmp_path / "profile.json"
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("raw", [
    b'{"name": "caf\xe9 \xff", "values": {}}',  # not UTF-8
    json.dumps({"name": "x[/red] [bold]y\x1b[2J\x07", "values": {}}).encode(),  # markup and escapes
])
def test_lint_env_takes_any_profile_name(tmp_path: Path, raw: bytes) -> None:
    env = tmp_path / "job.env"
    env.write_text("NCCL_IB_HCA=mlx5_0\n")
    result = CliRunner().invoke(app, ["lint-env", "--env-file", str(env), "--profile", str(_profile(tmp_path, raw)),
                                      "--sysfs-root", str(tmp_path)])
    assert result.exit_code in (0, 3), result.output
    assert "\x1b[2J" not in result.output and "\x07" not in result.output


def test_an_env_file_past_the_cap_is_refused_not_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an env file whose bad setting lies past the cap (the probe: 70 MB of padding, "No problems", exit 0;
    # the cap is lowered here so the file stays small)
    monkeypatch.setattr(env_module, "MAX_ENV_BYTES", 4096)
    env = tmp_path / "job.env"
    env.write_text("# padding\n" * 1000 + "NCCL_P2P_DISABLE=1\n")
    result = CliRunner().invoke(app, ["lint-env", "--env-file", str(env), "--sysfs-root", str(tmp_path)])
    assert result.exit_code == 2 and "would not be checked" in " ".join(result.output.split())
