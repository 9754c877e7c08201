"""perftracker never harms the job it sits next to, and keeps none of its secrets.

`perftracker run` on a disk that fills under a running job keeps passing the job's output through
and returns its exit code; SIGTERM stops `attach` as Ctrl-C does (manifests, the sampled profile and
the final analysis kept); secrets planted in a real job's environment and command line appear
nowhere in the run directory or its report. Small Python jobs (no torchrun) keep these fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.hostile.test_redaction import PLANTED_ARGS, PLANTED_ENV, PLANTED_VALUES
from tests.live.conftest import attach_command

ROOT = Path(__file__).resolve().parents[3]
RANK_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
LINES = 16000  # ~1 MB of output, four times what the disk below holds
FILLS_THE_DISK = f"""
import sys
for i in range({LINES}):
    print(f"line {{i:06d}} " + "x" * 50)
print("last line on stderr", file=sys.stderr)
sys.exit(7)
"""
RANK_AT_WORK = """
import sys, time
def work(n):
    return sum(i * i for i in range(n))
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    work(20000)
    time.sleep(0.01)
print("rank done")
"""


def perftracker_run(run_dir: Path, job: Sequence[str], env: dict[str, str] | None = None,
                    *options: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "perftracker", "run", "--no-hook", "--no-kineto-daemon", *options, "-o", str(run_dir),
           "--", sys.executable, *job]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=env, start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still running after {timeout:.0f}s: the job (or perftracker) blocked") from None
    return proc.returncode, out, err


def secrets_in(folder: Path) -> list[str]:
    """'file: secret' for every planted secret found in any file under `folder`."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(folder)}: {v}" for v in PLANTED_VALUES if v.encode() in data]
    return found


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(0.1)


def test_run_on_a_disk_that_fills_passes_the_jobs_output_and_exit_code_through(
        tmpfs: Callable[..., Path]) -> None:
    # GIVEN a run directory on a 256 KiB disk, and a job that prints ~1 MB, then a line on stderr, and exits 7
    disk = tmpfs("256k")
    # WHEN perftracker runs it: the copy of its output fills the disk while the job prints
    code, out, err = finish(perftracker_run(disk / "run", ["-c", FILLS_THE_DISK]), timeout=120)
    # THEN the job was never blocked: all its output passed through, in order, and the exit code is its own
    assert code == 7, err[-3000:]
    lines = out.splitlines()
    assert len(lines) == LINES and lines[0].startswith("line 000000") and lines[-1].startswith(f"line {LINES - 1:06d}")
    assert "last line on stderr" in err
    # AND the short copy is said (which file, why, what it kept), never as a traceback
    assert "launcher.stdout.log) stopped at" in err and "No space left on device" in err, err[-3000:]
    assert "Traceback" not in err and "internal error" not in err
    copy = disk / "run" / "output" / "launcher.stdout.log"
    assert 0 < copy.stat().st_size < len(out) and out.startswith(copy.read_text())


def test_a_copy_that_cannot_be_kept_is_noted_in_the_manifest_and_the_report(tmp_path: Path) -> None:
    # GIVEN a run directory where a file stands where the copies of the job's output go
    run = tmp_path / "run"
    run.mkdir()
    (run / "output").write_text("in the way")
    # WHEN a rank that works a second, prints and exits 3 runs there
    job = ["-c", RANK_AT_WORK.replace('print("rank done")', 'print("rank done"); sys.exit(3)'), "1"]
    code, out, err = finish(perftracker_run(run, job, {**os.environ, **RANK_ENV}), timeout=120)
    # THEN its output and exit code pass through, and the missing copies are said on stderr, kept in the
    # manifest's notes and in the report's notes
    assert code == 3 and out == "rank done\n", err[-3000:]
    assert err.count("stopped at 0 bytes") == 2
    notes = json.loads((run / "manifest.json").read_text())["notes"]
    assert sum("the copy of the job's" in n for n in notes) == 2
    doc = json.loads((run / "perftracker-out" / "findings.json").read_text())
    assert sum("the copy of the job's" in n["message"] for n in doc["notes"]) == 2


def test_run_keeps_no_secret_of_the_job(tmp_path: Path) -> None:
    # GIVEN a rank whose environment and command line hold planted secrets
    env = {**os.environ, **PLANTED_ENV, **RANK_ENV}
    run = tmp_path / "run"
    # WHEN perftracker runs it to its end, sampling stacks every second meanwhile
    code, out, err = finish(perftracker_run(run, ["-c", RANK_AT_WORK, "2.5", *PLANTED_ARGS], env,
                                            "--stack-interval", "1"), timeout=120)
    # THEN the job ran prepared (its environment snapshot and stacks were taken) with its exit code passed on
    assert code == 0 and "rank done" in out, err[-3000:]
    assert (run / "env" / "rank-0.json").is_file() and list(run.glob("stacks/*/rank-0.json"))
    assert (run / "perftracker-out" / "report.html").is_file()
    manifest = json.loads(next((run / "manifests").glob("*.json")).read_text())
    assert "--password <redacted>" in manifest["workers"][0]["cmdline"]
    # AND no planted secret is anywhere in the run directory, its manifests, outputs and report included
    assert secrets_in(run) == []


def test_sigterm_stops_attach_like_ctrl_c_keeping_everything_and_no_secret(tmp_path: Path) -> None:
    # GIVEN a rank with planted secrets in its environment and command line, and attach collecting from it
    target = subprocess.Popen([sys.executable, "-c", RANK_AT_WORK, "120", *PLANTED_ARGS],
                              env={**os.environ, **PLANTED_ENV, **RANK_ENV}, stdout=subprocess.DEVNULL)
    run = tmp_path / "run"
    attach = subprocess.Popen(attach_command(f"pid:{target.pid}", run, 0, "--profile-seconds", "6",
                                             "--stack-interval", "2"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        # WHEN the scheduler sends SIGTERM while the sampled-stack profile is recording
        wait_for(lambda: (run / "profiles").is_dir() and bool(list(run.glob("stacks/*/rank-0.json"))), 60,
                 "the profile recording")
        time.sleep(1.0)
        attach.send_signal(signal.SIGTERM)
        out, err = attach.communicate(timeout=120)
    finally:
        if attach.poll() is None:
            attach.kill()
        target.kill()
        target.wait()
    # THEN attach stops as on Ctrl-C, says why, and keeps everything: manifests, profile, final analysis
    assert attach.returncode == 0, out[-2000:] + err[-2000:]
    assert "Stopped (SIGTERM)" in out and "Traceback" not in err
    host_manifest = json.loads(next((run / "manifests").glob("*.json")).read_text())
    assert host_manifest["ended_because"] == "SIGTERM" and (run / "manifest.json").is_file()
    assert (run / "profiles" / "rank-0.txt").stat().st_size > 0 and (run / "profiles" / "rank-0.json").is_file()
    assert (run / "perftracker-out" / "findings.json").is_file() and (run / "perftracker-out" / "report.html").is_file()
    # AND no planted secret is anywhere in the run directory or the report
    assert secrets_in(run) == []
