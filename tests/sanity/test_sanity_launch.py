"""The launch is checked before the sanity check measures anything: every launcher variable that cannot be used
is named with its value (exit 2), an unresolvable or silent rendezvous is named within the time box (no C++
stack trace, no blame on a rank), and a check that failed never lets `run --sanity-exclude` start the job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.collectors.sanity.launch import Launch
from perftracker.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID")


def _env(**set_: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    return {**env, "PYTHONPATH": str(REPO), **set_}


@pytest.mark.parametrize(("variables", "named"), [
    ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE=0"),
    ({"WORLD_SIZE": "1000000000", "RANK": "0"}, "WORLD_SIZE=1000000000"),
    ({"WORLD_SIZE": "2", "RANK": "-1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK=-1"),
    ({"WORLD_SIZE": "2", "RANK": "abc", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK='abc'"),
    ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK=2"),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "7", "MASTER_ADDR": "h", "MASTER_PORT": "29500"},
     "LOCAL_RANK=7"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
    ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_PORT": "29500"}, "MASTER_ADDR is not set"),
])
def test_a_launcher_variable_that_cannot_be_used_is_exit_2_naming_it(
        variables: dict[str, str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN one process whose launcher variables hold a value no launch can have (the probes)
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in variables.items():
        monkeypatch.setenv(var, value)
    # WHEN the check starts
    result = CliRunner().invoke(app, ["sanity", "-o", str(tmp_path / "o"), "--time-box", "5"])
    # THEN it exits 2 before measuring anything, naming the variable and its value, and writes nothing
    assert result.exit_code == 2, result.output
    assert named in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "o").exists()


def test_slurm_and_open_mpi_variables_are_still_read_and_a_port_only_is_named_as_missing_the_address() -> None:
    # GIVEN srun's variables with the rendezvous exported, and a MASTER_PORT alone (MASTER_ADDR missing)
    slurm = Launch.from_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                             "MASTER_ADDR": "n1", "MASTER_PORT": "29500"})
    assert (slurm.rank, slurm.world, slurm.local_rank, slurm.master_port) == (5, 8, 1, 29500)
    # THEN the missing one is named, not both
    with pytest.raises(UsageError, match=r"MASTER_PORT is not set"):
        Launch.from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "MASTER_ADDR": "n1"})


def _run_check(env: dict[str, str], out: Path, box: str = "5") -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "perftracker", "sanity", "-o", str(out), "--time-box", box],
                          env=env, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - t0


def test_an_unresolvable_rendezvous_address_is_named_at_once(tmp_path: Path) -> None:
    # GIVEN rank 1 of 2 whose MASTER_ADDR does not resolve (a typo in the head node's name)
    env = _env(RANK="1", WORLD_SIZE="2", MASTER_ADDR="no-such-node.invalid", MASTER_PORT="29500")
    done, took = _run_check(env, tmp_path / "o")
    # THEN exit 2 naming MASTER_ADDR and its value, within the 5 s box (plus the interpreter's start)
    assert done.returncode == 2, done.stderr
    assert "MASTER_ADDR='no-such-node.invalid' does not resolve" in done.stderr
    assert "Traceback" not in done.stderr and took < 5 + 40  # (the interpreter's start at load 10+: ~20 s)


def test_a_rendezvous_nothing_answers_at_is_named_within_the_box(tmp_path: Path) -> None:
    # GIVEN rank 1 of 2 under torchrun (its agent's store listens before any rank starts) pointed at a port
    # nothing listens on (the first node is not up)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _env(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               TORCHELASTIC_USE_AGENT_STORE="True")
    done, took = _run_check(env, tmp_path / "o")
    # THEN it fails (exit 1) naming the address and port within the box, with no stack trace and no rank blamed
    assert done.returncode == 1, done.stderr
    assert f"nothing answered at the rendezvous MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port} within 5 s" in done.stderr
    assert "Traceback" not in done.stderr and "sent no result" not in done.stderr
    assert took < 5 + 40, took  # the box, and the interpreter's start on a loaded 2-core machine


@pytest.mark.slow
def test_run_sanity_exclude_on_a_full_filesystem_does_not_start_the_job(tmp_path: Path,
                                                                         tmpfs: Callable[..., Path]) -> None:
    # GIVEN a run directory on a filesystem with a few kB left: the check's report cannot be written there
    disk = tmpfs("1m")
    (disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 64 * 1024))
    marker = tmp_path / "job-ran"
    job = tmp_path / "train.py"
    job.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    # WHEN `perftracker run --sanity-exclude` is asked to check the nodes first and then run the job
    done = subprocess.run([sys.executable, "-m", "perftracker", "run", "--sanity-exclude", "--sanity-time-box", "5",
                           "-o", str(disk / "run"), "--", sys.executable, str(job)],
                          env=_env(), capture_output=True, text=True, timeout=180)
    # THEN the failed check is not a pass: exit 4, the job not started, the reason (no space) said
    assert done.returncode == 4, done.stderr
    assert not marker.exists()
    assert "the sanity check failed" in done.stderr or "could not run" in done.stderr, done.stderr
    assert "No space left on device" in done.stderr, done.stderr
    assert "names no node to exclude" not in done.stderr
