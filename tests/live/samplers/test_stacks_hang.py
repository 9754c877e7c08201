"""Stacks and hang diagnosis: the `hang` analyzer on stack files, the StackSampler on real processes,
and `perftracker attach` on real torchrun (gloo, CPU) jobs where one rank hangs or the job exits."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.hang import analyze_hang, diagnose
from perftracker.analyzers.failures.stack_state import DDP_WAIT
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.online import AnalyzerDiagnosis
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.stacks.snapshots import load_stack_inputs
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.stacks import StackSampler, find_pyspy
from perftracker.store import Store

from ..conftest import attach_command, launch_job, stop_job, wait_steps, wait_workers

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
GRAPH = "/venv/lib/python3.11/site-packages/torch/autograd/graph.py"
TRAIN = "/job/train.py"
IN_ALL_REDUCE = [("all_reduce", C10D, 3252), ("_exception_logger.<locals>.wrapper", LOGGER, 83),
                 ("<module>", TRAIN, 66)]
SLEEPING = [("hang_or_sleep", TRAIN, 44), ("<module>", TRAIN, 64)]
T0 = 1_764_000_000_000_000_000


def write_rank(run: Path, snapshot: str, rank: int, frames: Sequence[tuple[str, str, int]], *, active: bool = False,
               world: int = 4, mode: str = "nonblocking", ts_ns: int = T0, host: str = "node-a",
               switches: int | None = None) -> Path:
    """One stacks/<snapshot>/rank-<r>.json as StackSampler writes it (py-spy --json threads)."""
    pid = 1000 + rank
    thread = {"pid": pid, "thread_id": 7, "thread_name": None, "os_thread_id": pid, "active": active,
              "owns_gil": False, "process_info": None,
              "frames": [{"name": n, "filename": f, "short_filename": f.split("site-packages/")[-1].split("/job/")[-1],
                          "line": ln, "module": None, "locals": None} for n, f, ln in frames]}
    helper = {**thread, "os_thread_id": pid + 50, "thread_name": "pt_helper", "frames": SLEEPING}
    path = run / "stacks" / snapshot / f"rank-{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rank": rank, "pid": pid, "host": host, "ts_ns": ts_ns, "mode": mode,
                                "world_size": world, "switches": switches, "threads": [thread, helper]}))
    return path


def findings_for(run: Path, last_step_ns: int = -1) -> list:  # type: ignore[type-arg]
    frame, notes = load_stack_inputs(sorted(run.rglob("rank-*.json")))
    assert not notes
    return diagnose(frame, last_step_ns)


# -- the analyzer on stack files --------------------------------------------------------------------

def test_hang_dump_names_the_rank_outside_the_collective(tmp_path: Path) -> None:
    # GIVEN a hang dump where ranks 0, 2, 3 wait in all_reduce and rank 1 sleeps
    for r in (0, 2, 3):
        write_rank(tmp_path, "20250101T000010.000Z-hang", r, IN_ALL_REDUCE, mode="native")
    write_rank(tmp_path, "20250101T000010.000Z-hang", 1, SLEEPING, mode="native")
    # WHEN the hang analyzer reads it
    found = findings_for(tmp_path)
    # THEN one critical finding names rank 1, the collective and both source lines
    assert len(found) == 1
    f = found[0]
    assert f.severity == Severity.CRITICAL and f.ranks == (1,)
    assert f.title == ("Rank 1 is not in the collective all_reduce (train.py:66) where ranks 0, 2, 3 wait; "
                       "it is at hang_or_sleep (train.py:44)")
    assert f.evidence["waiting_ranks"] == [0, 2, 3] and f.evidence["suspect_ranks"] == [1]
    assert [g["ranks"] for g in f.evidence["groups"]] == [[0, 2, 3], [1]]
    assert f.evidence["snapshot"].endswith("-hang") and f.evidence["snapshot_time"].startswith("2025")


def test_hang_dump_is_judged_unless_a_later_snapshot_shows_the_job_moved_on(tmp_path: Path) -> None:
    # GIVEN an earlier periodic snapshot where the ranks compute, then a hang dump
    for r in (0, 2, 3):
        write_rank(tmp_path, "a", r, [("forward", TRAIN, 12)], ts_ns=T0 - 10**9, active=True)
        write_rank(tmp_path, "b-hang", r, IN_ALL_REDUCE, ts_ns=T0)
    write_rank(tmp_path, "a", 1, [("forward", TRAIN, 12)], ts_ns=T0 - 10**9, active=True)
    write_rank(tmp_path, "b-hang", 1, SLEEPING, ts_ns=T0)
    # WHEN analysed THEN the hang dump is judged
    (f,) = findings_for(tmp_path)
    assert f.ranks == (1,) and f.evidence["snapshot"] == "b-hang"
    # GIVEN a later periodic snapshot where rank 1 is elsewhere (it was only slow) THEN no finding
    for r in range(4):
        write_rank(tmp_path, "c", r, [("forward", TRAIN, 12)], ts_ns=T0 + 10**9, active=True)
    assert findings_for(tmp_path) == []


def test_a_hang_dump_of_ranks_that_kept_waking_up_afterwards_is_not_a_hang(tmp_path: Path) -> None:
    # GIVEN a hang dump where every rank is idle in the job's own sleep, and a periodic snapshot 2 s later with the
    # ranks in the same place (a job whose step is mostly one sleep: attach under load, 2026-12-07)
    for run, woke in (("looping", 52), ("stuck", 0)):
        for r in range(4):
            write_rank(tmp_path / run, "a-hang", r, SLEEPING, ts_ns=T0, switches=458 + r)
            write_rank(tmp_path / run, "b", r, SLEEPING, ts_ns=T0 + 2 * 10**9, switches=458 + r + woke)
    # WHEN analysed THEN the ranks that woke up 52 times in between moved on: no hang; the ones that did not are
    assert findings_for(tmp_path / "looping") == []
    (f,) = findings_for(tmp_path / "stuck")
    assert f.evidence["snapshot"] == "a-hang"


def test_every_rank_waiting_in_one_collective_points_at_ranks_without_stacks(tmp_path: Path) -> None:
    # GIVEN 4 of 8 ranks (one node attached) all waiting in the same all_reduce
    for r in range(4):
        write_rank(tmp_path, "x-hang", r, IN_ALL_REDUCE, world=8)
    # WHEN analysed
    (f,) = findings_for(tmp_path)
    # THEN it says every attached rank waits there and the others have no stacks
    assert f.severity == Severity.CRITICAL
    assert "Every rank with stacks (0, 1, 2, 3) waits in the collective all_reduce (train.py:66)" in f.title
    assert "ranks 4, 5, 6, 7 have no stacks" in f.title
    assert f.evidence["missing_ranks"] == [4, 5, 6, 7]
    assert "--stacks-at" in f.recommendation


def test_ranks_in_different_collectives_is_a_mismatch(tmp_path: Path) -> None:
    # GIVEN ranks 0, 1 in all_reduce and ranks 2, 3 in a barrier at another line
    barrier = [("barrier", C10D, 4800), ("<module>", TRAIN, 90)]
    for r in (0, 1):
        write_rank(tmp_path, "x-hang", r, IN_ALL_REDUCE)
    for r in (2, 3):
        write_rank(tmp_path, "x-hang", r, barrier)
    # WHEN analysed THEN the finding names both collectives
    (f,) = findings_for(tmp_path)
    assert f.title.startswith("Ranks wait in different collectives")
    assert "all_reduce (train.py:66)" in f.title and "barrier (train.py:90)" in f.title


def test_idle_ddp_backward_and_native_work_wait_count_as_waiting(tmp_path: Path) -> None:
    # GIVEN rank 0 idle in DDP's backward, rank 1 natively in c10d::Work::wait, rank 2 computing
    ddp = [("_engine_run_backward", GRAPH, 829), ("backward", "/venv/lib/python3.11/site-packages/torch/_tensor.py",
                                                                       625), ("step", TRAIN, 30)]
    native = [("pthread_cond_wait", "/lib/libc.so.6", 0), ("c10d::Work::wait", "/x/libtorch_cpu.so", 0),
              ("step", TRAIN, 31)]
    write_rank(tmp_path, "x-hang", 0, ddp)
    write_rank(tmp_path, "x-hang", 1, native, mode="native")
    write_rank(tmp_path, "x-hang", 2, [("forward", TRAIN, 12), ("step", TRAIN, 28)], active=True)
    # WHEN analysed
    (f,) = findings_for(tmp_path)
    # THEN rank 2 is the suspect; the DDP wait is the collective of the largest group
    assert f.ranks == (2,)
    waits = {g["collective"] for g in f.evidence["groups"]}
    assert waits == {DDP_WAIT, "c10d::Work::wait", ""}
    assert "it is at forward (train.py:12)" in f.title


def test_two_alike_periodic_snapshots_are_a_hang_unless_steps_went_on(tmp_path: Path) -> None:
    # GIVEN two periodic (non-blocking) snapshots 15 s apart with the same split
    for i, snap in enumerate(("p1", "p2")):
        for r in (0, 2, 3):
            write_rank(tmp_path, snap, r, IN_ALL_REDUCE, ts_ns=T0 + i * 15 * 10**9)
        write_rank(tmp_path, snap, 1, SLEEPING, ts_ns=T0 + i * 15 * 10**9)
    # WHEN analysed without step data THEN it is a hang
    (f,) = findings_for(tmp_path)
    assert f.ranks == (1,) and f.severity == Severity.CRITICAL and "p1" in f.evidence["chosen_because"]
    # WHEN a step ended after the first snapshot THEN it is not (a slow rank, not a hang)
    assert findings_for(tmp_path, last_step_ns=T0 + 5 * 10**9) == []


def test_alike_snapshots_of_ranks_that_kept_waking_up_are_not_a_hang(tmp_path: Path) -> None:
    # GIVEN two periodic snapshots 15 s apart with the same split, where the waiting ranks' main threads
    # switched thousands of times in between (they finish a collective every step: a slow rank, no hang)
    for i, snap in enumerate(("p1", "p2")):
        for r in (0, 2, 3):
            write_rank(tmp_path / "busy", snap, r, IN_ALL_REDUCE, ts_ns=T0 + i * 15 * 10**9, switches=100 + 4000 * i)
            write_rank(tmp_path / "stuck", snap, r, IN_ALL_REDUCE, ts_ns=T0 + i * 15 * 10**9, switches=100 + i)
        for run in ("busy", "stuck"):
            write_rank(tmp_path / run, snap, 1, SLEEPING, ts_ns=T0 + i * 15 * 10**9, switches=50 + 3000 * i)
    # WHEN analysed THEN the looping job is not called hung, and the truly blocked one still is
    assert findings_for(tmp_path / "busy") == []
    (f,) = findings_for(tmp_path / "stuck")
    assert f.ranks == (1,) and f.severity == Severity.CRITICAL


def test_a_healthy_job_gives_no_finding(tmp_path: Path) -> None:
    # GIVEN periodic snapshots where the picture changes between rounds, and one single snapshot
    for r in (0, 2, 3):
        write_rank(tmp_path, "p1", r, IN_ALL_REDUCE, ts_ns=T0)
        write_rank(tmp_path, "p2", r, [("forward", TRAIN, 12)], active=True, ts_ns=T0 + 15 * 10**9)
    write_rank(tmp_path, "p1", 1, [("forward", TRAIN, 12)], active=True, ts_ns=T0)
    write_rank(tmp_path, "p2", 1, IN_ALL_REDUCE, ts_ns=T0 + 15 * 10**9)
    # WHEN analysed THEN nothing is reported
    assert findings_for(tmp_path) == []
    # AND a Store without stacks gives no finding either
    assert analyze_hang(Analysis(Store())) == []


def test_one_agreed_time_snapshot_gives_a_warning(tmp_path: Path) -> None:
    # GIVEN one --stacks-at snapshot with a split
    for r in (0, 2, 3):
        write_rank(tmp_path, "t-at", r, IN_ALL_REDUCE)
    write_rank(tmp_path, "t-at", 1, SLEEPING)
    # WHEN analysed THEN a warning (one look cannot tell a hang from a slow rank) names rank 1
    (f,) = findings_for(tmp_path)
    assert f.severity == Severity.WARNING and f.ranks == (1,)


def test_analyze_loads_a_run_dir_of_stacks_only(tmp_path: Path) -> None:
    # GIVEN a run directory with stack snapshots and nothing else
    for r in (0, 2, 3):
        write_rank(tmp_path, "20250101T000010.000Z-hang", r, IN_ALL_REDUCE)
    write_rank(tmp_path, "20250101T000010.000Z-hang", 1, SLEEPING)
    # WHEN loaded like `analyze` does
    store = load_path(tmp_path, LoadOptions(cache_dir=None))
    # THEN the stacks table holds every thread, none is mistaken for a trace, and the analyzer finds rank 1
    assert len(store["stacks"]) == 8 and int(store["stacks"]["main"].sum()) == 4
    assert not [n for n in store.notes if n.level == "error"]
    assert store["stacks"]["mode"].eq("nonblocking").all()
    (f,) = analyze_hang(Analysis(store))
    assert f.ranks == (1,)


# -- the sampler on real processes -------------------------------------------------------------------

IDLE = "import time\ndef idle_here():\n    while True:\n        time.sleep({sleep_s})\nidle_here()\n"


@contextlib.contextmanager
def idle_processes(tmp_path: Path, sleep_s: float) -> Iterator[tuple[LiveContext, list[subprocess.Popen[bytes]]]]:
    """Two real processes looping in `idle_here` over `time.sleep(sleep_s)`, and a LiveContext on them as the CLI's."""
    if find_pyspy() is None:
        pytest.skip("py-spy is not installed")
    script = tmp_path / "idle.py"
    script.write_text(IDLE.format(sleep_s=sleep_s))
    procs = [subprocess.Popen([sys.executable, str(script)], start_new_session=True) for _ in range(2)]
    workers = [Worker(rank=i, local_rank=i, pid=p.pid, host="h", cmdline="idle", run_id="t", world_size=2,
                      parent=1) for i, p in enumerate(procs)]
    ctx = LiveContext(run_dir=tmp_path / "run", job=Job(workers), host="h", diagnosis=AnalyzerDiagnosis())
    time.sleep(1.0)  # let them reach idle_here
    try:
        yield ctx, procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[tuple[LiveContext, list[subprocess.Popen[bytes]]]]:
    with idle_processes(tmp_path, 3600) as made:
        yield made


def test_sampler_dumps_every_rank_and_detects_ranks_idle_in_one_place(
        sleepers: tuple[LiveContext, list[subprocess.Popen[bytes]]]) -> None:
    ctx, _ = sleepers
    # GIVEN two processes idle in the same function, and a sampler with a short confirmation delay
    sampler = StackSampler(interval_s=60, confirm_s=0.3)
    sampler.start(ctx)
    try:
        # WHEN one periodic round runs (the watcher confirms it shortly after)
        sampler.sample(ctx)
        deadline = time.monotonic() + 20
        while not ctx.progress.suspicion and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        sampler.stop(ctx)
    # THEN a non-blocking snapshot and a native hang dump of both ranks exist, and the suspicion says why
    snaps = sorted(p.name for p in (ctx.run_dir / "stacks").iterdir())
    assert any(s.endswith("-hang") for s in snaps) and len(snaps) >= 3
    hang = next(ctx.run_dir.glob("stacks/*-hang"))
    records = [json.loads(p.read_text()) for p in sorted(hang.glob("rank-*.json"))]
    assert [r["rank"] for r in records] == [0, 1] and {r["mode"] for r in records} <= {"native", "blocking"}
    assert "every rank (2) is idle at idle_here" in ctx.progress.suspicion
    assert sampler.hang_dumps == 1


def test_a_periodic_round_is_the_recheck_a_pending_confirmation_asked_for(tmp_path: Path) -> None:
    # GIVEN two processes that look idle in one place at every look but wake up every 0.3 s (a step that is mostly
    # one sleep), and a sampler whose first round asks for a re-check 1.5 s later
    sampler = StackSampler(interval_s=60, confirm_s=1.5)
    with idle_processes(tmp_path, 0.3) as (ctx, _):
        sampler.start(ctx)
        try:
            sampler.sample(ctx)
            # WHEN the next periodic round comes just before the re-check would
            time.sleep(1.2)
            sampler.sample(ctx)
            time.sleep(2.0)
        finally:
            sampler.stop(ctx)
    # THEN that round was the re-check (it saw them wake up): no second look right after it, which would have
    # compared two looks too close to show anything, and no hang dump
    assert sampler.rounds == 2 and sampler.hang_dumps == 0 and not ctx.progress.suspicion, (
        sorted(p.name for p in (ctx.run_dir / "stacks").iterdir()), ctx.progress.suspicion)


def test_sampler_dumps_on_request_and_on_stalled_steps_and_survives_an_exited_rank(
        sleepers: tuple[LiveContext, list[subprocess.Popen[bytes]]]) -> None:
    ctx, procs = sleepers
    sampler = StackSampler(interval_s=60)
    sampler.start(ctx)
    try:
        # GIVEN a user request for a dump WHEN the watcher sees it THEN a native dump of every rank is written
        # as one explicit "-request" snapshot (not a hang dump), and no hang is suspected
        ctx.progress.hang_requested = True
        deadline = time.monotonic() + 20
        while sampler.requested_dumps == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        requested = [p for p in (ctx.run_dir / "stacks").iterdir() if p.name.endswith("-request")]
        assert not ctx.progress.hang_requested and len(requested) == 1 and not ctx.progress.suspicion
        assert sorted(p.name for p in requested[0].glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
        assert json.loads((requested[0] / "rank-0.json").read_text())["mode"] == "native"
        # GIVEN rank 1 exited and steps (median 0.1 s) stopped 10 s ago WHEN the watcher looks
        procs[1].kill()
        procs[1].wait()
        with ctx.lock:
            ctx.progress.steps.set_durations([100_000_000] * 10)
            ctx.progress.steps.last_step_ns = {0: time.time_ns() - 10 * 10**9}
            ctx.progress.suspicion = ""
        deadline = time.monotonic() + 20
        while not ctx.progress.suspicion and time.monotonic() < deadline:
            time.sleep(0.1)
        # THEN a stall dump of the remaining rank is taken and the suspicion says how long it has been quiet
        assert "no step for 10 s" in ctx.progress.suspicion
        sampler.sample(ctx)  # a periodic round with one rank gone still works
    finally:
        sampler.stop(ctx)
    latest = max((ctx.run_dir / "stacks").iterdir())
    assert [p.name for p in latest.glob("rank-*.json")] == ["rank-0.json"]


def test_sampler_explains_missing_pyspy_and_permission_problems(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = LiveContext(run_dir=tmp_path, job=Job([]), host="h")
    # GIVEN no py-spy WHEN started THEN one note says how to get it, and sampling does nothing
    monkeypatch.setattr("perftracker.live.samplers.stacks.find_pyspy", lambda: None)
    sampler = StackSampler()
    sampler.start(ctx)
    sampler.sample(ctx)
    sampler.stop(ctx)
    assert any("pip install py-spy" in n for n in ctx.notes) and "not installed" in sampler.status()
    # GIVEN py-spy refusing with a permission error THEN the note names the fix
    worker = Worker(rank=3, local_rank=3, pid=42, host="h", cmdline="", run_id="", world_size=4, parent=1)
    assert StackSampler(pyspy="py-spy")._parse(ctx, worker, "nonblocking", 1, "",
                                               "Error: Permission Denied: Try running again with elevated "
                                               "permissions") is None
    assert any("rank 3" in n and "CAP_SYS_PTRACE" in n and "root" in n for n in ctx.notes)


# -- attach on real torchrun jobs -------------------------------------------------------------------

HANG_ARGS = ["--steps", "100000", "--hang-rank", "1", "--hang-step", "3", "--step-sleep", "0.05",
             "--pg-timeout", "300"]


def _hang_finding(out: Path) -> dict:  # type: ignore[type-arg]
    doc = json.loads((out / "perftracker-out" / "findings.json").read_text())
    hangs = [f for f in doc["findings"] if f["analyzer"] == "hang"]
    assert len(hangs) == 1, doc["findings"]
    return hangs[0]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_attach_by_launcher_pid_and_by_run_id_names_the_hung_rank(tmp_path: Path) -> None:
    # GIVEN a 4-rank torchrun job, launched with --rdzv-id (TORCHELASTIC_RUN_ID), where rank 1 never joins step 3's
    # all_reduce (one job for both ways of finding it: a job start is ~15 s of CPU here)
    job = launch_job(tmp_path / "job", 4, HANG_ARGS, run_id="ptstacks42")
    try:
        wait_workers(job, 4)
        wait_steps(tmp_path / "job", 0, 3)
        # WHEN attach runs against the launcher pid at default intervals
        by_pid = tmp_path / "by-pid"
        res = subprocess.run(attach_command(f"pid:{job.pid}", by_pid, 25), capture_output=True, text=True,
                             check=False, timeout=120)
        # AND again, finding the job by its run id, with a short stack interval
        by_run_id = tmp_path / "by-run-id"
        res_run_id = subprocess.run(attach_command("runid:ptstacks42", by_run_id, 10, "--stack-interval", "4"),
                                    capture_output=True, text=True, check=False, timeout=90)
    finally:
        stop_job(job)
    # THEN the hang finding names rank 1 and the all_reduce (and its line) the others wait in
    assert res.returncode == 0, res.stdout + res.stderr
    f = _hang_finding(by_pid)
    assert f["severity"] == "critical" and f["ranks"] == [1]
    assert f["title"].startswith("Rank 1 is not in the collective all_reduce (sample_job.py:")
    assert "where ranks 0, 2, 3 wait; it is at hang_forever (sample_job.py:" in f["title"]
    # AND stacks/ holds periodic snapshots and a native hang dump of every rank
    snaps = sorted(p.name for p in (by_pid / "stacks").iterdir())
    hang = [s for s in snaps if s.endswith("-hang")]
    assert hang and len(snaps) >= 2
    assert sorted(p.name for p in (by_pid / "stacks" / hang[0]).iterdir()) == [f"rank-{r}.json" for r in range(4)]
    assert json.loads((by_pid / "stacks" / hang[0] / "rank-0.json").read_text())["mode"] == "native"
    # AND without a GPU the output says NVML is not available, and the rest went on
    assert "NVML is not available" in res.stdout
    # AND by run id it attached to the four ranks of that job and found rank 1
    assert res_run_id.returncode == 0, res_run_id.stdout + res_run_id.stderr
    assert "Attached to 4 rank(s) (0, 1, 2, 3) of job ptstacks42" in res_run_id.stdout
    assert _hang_finding(by_run_id)["ranks"] == [1]


@pytest.mark.slow
def test_attach_keeps_going_when_the_job_exits(tmp_path: Path) -> None:
    # GIVEN a healthy job that ends ~15 s from now (its steps mostly sleep, so a busy machine does not stretch
    # it past attach's duration)
    job = launch_job(tmp_path / "job", 4, ["--steps", "250", "--step-sleep", "0.05", "--width", "64", "--batch", "16"])
    try:
        wait_workers(job, 4)
        wait_steps(tmp_path / "job", 0, 1)
        # WHEN attach runs with a duration longer than the job
        out = tmp_path / "run"
        started = time.monotonic()
        res = subprocess.run(attach_command(f"pid:{job.pid}", out, 90, "--stack-interval", "2"),
                             capture_output=True, text=True, check=False, timeout=150)
        took = time.monotonic() - started
        job.wait(timeout=30)
    finally:
        stop_job(job)
    # THEN attach stops when the job exits, says so, keeps what it wrote, exits 0, and finds no hang
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Stopped (job-exited)" in res.stdout and "exited while attached" in res.stdout
    assert took < 80 and (out / "manifest.json").is_file() and any((out / "stacks").iterdir())
    doc = json.loads((out / "perftracker-out" / "findings.json").read_text())
    assert not [f for f in doc["findings"] if f["analyzer"] == "hang"]
