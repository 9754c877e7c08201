"""`perftracker sanity` as a command: alone on this machine (no launcher: one rank, the CPU), the launcher's
rank variables, and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.collectors.sanity.comm import Launch
from perftracker.errors import UsageError

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)


def test_alone_it_measures_this_machine_and_writes_every_output(alone: None, tmp_path: Path) -> None:
    # GIVEN no launcher (one process on this machine)
    out = tmp_path / "out"
    # WHEN the check runs with a 5 s box
    result = CliRunner().invoke(app, ["sanity", "-o", str(out), "--time-box", "5"])
    # THEN it exits 0 having measured GEMM and copy on the CPU, judged nothing against peers (there are none) and
    # written the report, findings, scheduler files and the raw records
    assert result.exit_code == 0, result.output
    records = json.loads((out / "sanity.json").read_text())["records"]
    assert set(records["0"]["figures"]) == {"gemm_fp32_tflops", "copy_gbps"}
    assert all(v > 0 for v in records["0"]["figures"].values())
    assert records["0"]["elapsed_s"] <= 5 + 2
    assert (out / "exclude.txt").read_text() == "" and (out / "hostfile").read_text().endswith(" slots=1\n")
    assert (out / "report.html").is_file() and json.loads((out / "findings.json").read_text())["summary"]["exclude"] == []


def test_fail_on_warning_exits_3_when_the_node_s_nccl_settings_warn(alone: None, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN NCCL_DEBUG=TRACE in the environment (the setting lint warns about it in a production run)
    monkeypatch.setenv("NCCL_DEBUG", "TRACE")
    # WHEN the check runs with --fail-on warning
    result = CliRunner().invoke(app, ["sanity", "-o", str(tmp_path / "o"), "--time-box", "5", "--fail-on", "warning"])
    # THEN it exits 3 and the lint's finding is in findings.json, naming this node
    assert result.exit_code == 3, result.output
    titles = [f["title"] for f in json.loads((tmp_path / "o" / "findings.json").read_text())["findings"]]
    assert any("NCCL_DEBUG=TRACE" in t for t in titles), titles


def test_a_bad_time_box_is_a_usage_error(alone: None, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sanity", "-o", str(tmp_path), "--time-box", "1"])
    assert result.exit_code == 2 and "--time-box" in result.output


def test_slurm_and_open_mpi_rank_variables_are_read_and_a_missing_rendezvous_is_named() -> None:
    # GIVEN the variables srun and mpirun set
    slurm = Launch.from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                             "MASTER_ADDR": "n1", "MASTER_PORT": "29500"})
    ompi = Launch.from_env({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                            "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"})
    # THEN each rank knows its place, and without MASTER_ADDR the error says what to export
    assert (slurm.rank, slurm.world, slurm.local_rank) == (5, 8, 1)
    assert (ompi.rank, ompi.world, ompi.local_rank) == (2, 4, 0)
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        Launch.from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})
