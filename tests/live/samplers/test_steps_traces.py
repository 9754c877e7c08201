"""Step times and on-demand traces of a live job: log-line parsers, the in-process hook, and
`perftracker attach --trace-steps` against real torchrun jobs (hook, and libkineto's daemon protocol)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from perftracker.formats.framework_steps import StepLineParser
from perftracker.formats.log_lines import line_rank
from perftracker.hooks import spool_dir
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.steps_sampler import StepsSampler

REPO = Path(__file__).resolve().parents[3]
T0 = 1_800_000_000_000_000_000


# ---------------------------------------------------------------- log-line parsers
def test_megatron_line_gives_the_iteration_and_its_elapsed_time() -> None:
    # GIVEN a Megatron-LM log line with a torchrun --tee prefix
    line = ("[default3]: iteration      200/  317892 | consumed samples:   152832 | elapsed time per iteration "
            "(ms): 1250.5 | learning rate: 2.4E-04 | global batch size:   768 |")
    # WHEN it is parsed
    rec = StepLineParser(host="h").feed(line, T0)
    # THEN one record for rank 3, step 200, lasting 1250.5 ms and ending when the line was seen
    assert rec is not None
    assert (rec["rank"], rec["step"], rec["end_ns"]) == (3, 200, T0)
    assert rec["end_ns"] - rec["start_ns"] == 1_250_500_000


def test_megatron_timestamp_in_the_line_is_the_end_time() -> None:
    line = " [2024-03-07 15:27:02] iteration  10/  100 | elapsed time per iteration (ms): 100.0 | lm loss: 5.9"
    rec = StepLineParser().feed(line, T0)
    assert rec is not None and rec["rank"] == -1
    assert rec["end_ns"] == int(time.mktime(time.strptime("2024-03-07 15:27:02", "%Y-%m-%d %H:%M:%S"))) * 10**9


def test_deepspeed_step_lines_give_the_time_between_them_per_step() -> None:
    # GIVEN two DeepSpeed log_dist step lines 10 steps and 5 s apart, and a throughput-timer line
    parser = StepLineParser()
    first = "[2023-11-07 01:55:20,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[5e-05]"
    timer = ("[2023-11-07 01:55:20,003] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, "
             "RunningAvgSamplesPerSec=25.0, CurrSamplesPerSec=25.7, MemAllocated=4.32GB, MaxMemAllocated=38.49GB")
    second = "[2023-11-07 01:55:25,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=20, skipped=0, lr=[5e-05]"
    # WHEN fed in order
    got = [parser.feed(line, T0) for line in (first, timer, second)]
    # THEN the first sets the reference, the timer line is not double-counted, the second is 0.5 s/step
    assert got[0] is None and got[1] is None
    assert got[2] is not None and (got[2]["rank"], got[2]["step"]) == (0, 20)
    assert got[2]["end_ns"] - got[2]["start_ns"] == 500_000_000


def test_hf_trainer_progress_bar_gives_steps_from_its_rate() -> None:
    parser = StepLineParser()
    fast = parser.feed(" 10%|#         | 50/500 [00:25<03:45,  2.00it/s]", T0)
    slow = parser.feed(" 10%|#         | 51/500 [00:27<03:45,  1.50s/it]", T0 + 10**9)
    again = parser.feed(" 10%|#         | 51/500 [00:27<03:45,  1.50s/it]", T0 + 2 * 10**9)
    assert fast is not None and fast["step"] == 50 and fast["end_ns"] - fast["start_ns"] == 500_000_000
    assert slow is not None and slow["end_ns"] - slow["start_ns"] == 1_500_000_000
    assert again is None  # tqdm redraws the same step: counted once


def test_hf_logged_dicts_with_a_step_and_lines_without_steps() -> None:
    parser = StepLineParser()
    assert parser.feed("{'loss': 2.3, 'learning_rate': 5e-05, 'epoch': 0.1, 'step': 10}", T0) is None
    rec = parser.feed("{'loss': 2.1, 'learning_rate': 5e-05, 'epoch': 0.2, 'step': 20}", T0 + 10**9)
    assert rec is not None and rec["end_ns"] - rec["start_ns"] == 100_000_000
    assert parser.feed("{'train_runtime': 12.3, 'train_steps_per_second': 4.0, 'epoch': 1.0}", T0) is None
    assert parser.feed("loading checkpoint shards: done", T0) is None


def test_launcher_prefixes_name_the_rank() -> None:
    assert line_rank("[default2]:hello") == 2
    assert line_rank("[rank5]: iteration 3") == 5
    assert line_rank("[1,7]<stdout>: step") == 7
    assert line_rank("no prefix here") == -1


def test_steps_sampler_writes_log_steps_and_notes_when_no_source(tmp_path: Path) -> None:
    # GIVEN a job log that gains Megatron lines while attached, and a fake job (this process)
    log = tmp_path / "job.log"
    log.write_text("starting\n")
    me = Worker(rank=0, local_rank=0, pid=os.getpid(), host="h", cmdline="x", run_id="", world_size=1,
                parent=os.getppid())
    ctx = LiveContext(run_dir=tmp_path / "run", job=Job([me]), host="h")
    sampler = StepsSampler(job_log=log)
    sampler.start(ctx)
    with open(log, "a") as handle:
        handle.write("[default0]: iteration 7/ 9 | elapsed time per iteration (ms): 40.0 | loss 1\n")
    # WHEN sampled and stopped
    sampler.sample(ctx)
    sampler.stop(ctx)
    # THEN the step is in steps/rank-0.jsonl and in the progress; a sampler with no source leaves a note
    records = [json.loads(x) for x in (tmp_path / "run" / "steps" / "rank-0.jsonl").read_text().splitlines()]
    assert [(r["step"], r["format"]) for r in records] == [(7, "megatron")]
    assert ctx.progress.steps.last_step == {0: 7}
    bare = LiveContext(run_dir=tmp_path / "run2", job=Job([me]), host="h")
    empty = StepsSampler()
    empty.start(bare)
    empty.stop(bare)
    assert any("perftracker.hooks.install()" in n and "--job-log" in n for n in bare.notes)


# ---------------------------------------------------------------- the hook, in one process
HOOK_LOOP = """
import json, sys, time
import perftracker.hooks as hooks
hooks.install(sys.argv[1])
hooks.install(sys.argv[1])  # idempotent
import torch
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(int(sys.argv[2])):
    if i == 3:
        (hooks.installed_dir() / "requests" / "trace-t1.json").write_text(json.dumps({"steps": 2}))
    loss = model(torch.randn(8, 32)).sum()
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.03)
"""


def test_hook_records_steps_and_serves_a_trace_request(tmp_path: Path) -> None:
    # GIVEN a tiny training loop (no torchrun) that installs the hook and asks for a 2-step trace
    script = tmp_path / "loop.py"
    script.write_text(HOOK_LOOP)
    spool = tmp_path / "spool"
    # WHEN it runs 80 steps
    done = subprocess.run([sys.executable, str(script), str(spool), "80"], cwd=REPO, check=False, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    # THEN: no warning, 79 step records (the first step has no start), a gzip trace of 2 profiler steps
    assert done.returncode == 0, done.stderr
    assert "perftracker.hooks" not in done.stderr
    records = [json.loads(x) for x in (spool / "steps" / "rank-0.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 80))
    assert all(r["end_ns"] > r["start_ns"] and r["phases_ns"]["optimizer"] > 0 for r in records)
    assert json.loads((spool / "ranks" / "rank-0.json").read_text())["pid"] > 0
    assert (spool / "requests" / "trace-t1.rank-0.done").is_file()
    with gzip.open(spool / "traces" / "rank-0.t1.pt.trace.json.gz") as handle:
        trace = json.load(handle)
    steps = {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    assert len(steps) == 2


OWN_PROFILER_LOOP = """
import json, sys, time
import perftracker.hooks as hooks
hooks.install(sys.argv[1])
import torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with torch.profiler.profile():
    for i in range(40):
        if i == 3:
            (hooks.installed_dir() / "requests" / "trace-t2.json").write_text(json.dumps({"steps": 2}))
        model(torch.randn(4, 8)).sum().backward(); opt.step(); time.sleep(0.03)
"""


def test_hook_leaves_the_jobs_own_profiler_alone(tmp_path: Path) -> None:
    # GIVEN a loop that runs its own torch.profiler when a trace request arrives
    script = tmp_path / "own.py"
    script.write_text(OWN_PROFILER_LOOP)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "spool")], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    # THEN the request is answered with an error, one warning line, and steps are still recorded
    assert done.returncode == 0, done.stderr
    marker = json.loads((tmp_path / "spool" / "requests" / "trace-t2.rank-0.done").read_text())
    assert "own profiler" in marker["error"]
    assert done.stderr.count("perftracker.hooks:") == 1
    assert len((tmp_path / "spool" / "steps" / "rank-0.jsonl").read_text().splitlines()) == 39


def test_install_never_raises_into_the_job(tmp_path: Path) -> None:
    # GIVEN a spool path that cannot be created (a file is in the way)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = f"import perftracker.hooks as h; h.install({str(blocker / 'sub')!r}); print('alive')"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False, capture_output=True, text=True, timeout=60)
    # THEN the job goes on with one warning line
    assert done.returncode == 0 and done.stdout.strip() == "alive"
    assert done.stderr.count("perftracker.hooks:") == 1


def test_spool_dir_rule() -> None:
    assert spool_dir({"PERFTRACKER_RUN_DIR": "/x/run"}, 5) == Path("/x/run")
    assert spool_dir({"TMPDIR": "/t", "TORCHELASTIC_RUN_ID": "abc"}, 5) == Path("/t/perftracker/abc")
    assert spool_dir({"TORCHELASTIC_RUN_ID": "none"}, 5) == Path("/tmp/perftracker/pid-5")


# ---------------------------------------------------------------- real torchrun jobs
def _launch(run_dir: Path, nproc: int, extra_env: dict[str, str], job_args: list[str]) -> subprocess.Popen[bytes]:
    sys.path.insert(0, str(REPO / "scripts"))
    from sample_job_runner import free_port, job_command

    cmd = job_command(run_dir, nproc, free_port(), ["--profile-steps", "0", "--steps", "100000", "--width", "64",
                                                    "--batch", "16", "--step-sleep", "0.02", *job_args])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra_env}
    with open(run_dir.parent / f"{run_dir.name}.log", "wb") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_workers(proc: subprocess.Popen[bytes], nproc: int) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from sample_job_runner import worker_pids

    deadline = time.monotonic() + 60
    while len(worker_pids(proc.pid)) < nproc:
        assert proc.poll() is None and time.monotonic() < deadline, "workers did not come up"
        time.sleep(0.2)
    time.sleep(2)  # the hook is installed after init_process_group


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)


def _attach(launcher: int, out: Path, duration: int) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "perftracker", "attach", f"pid:{launcher}", "--duration", str(duration),
           "--trace-steps", "2", "-o", str(out), "--quiet", "--no-analyze", "--no-stacks"]
    return subprocess.run(cmd, cwd=REPO, check=False, capture_output=True, text=True, timeout=duration + 90)


@pytest.mark.slow
def test_attach_collects_hook_steps_and_a_trace_per_rank(tmp_path: Path) -> None:
    # GIVEN a 2-rank torchrun job with the hook (its spool under this test's TMPDIR)
    job = _launch(tmp_path / "job", 2, {"TMPDIR": str(tmp_path)}, ["--hook"])
    try:
        _wait_workers(job, 2)
        # WHEN attach runs 15 s asking for 2-step traces
        done = _attach(job.pid, tmp_path / "run", 15)
    finally:
        _kill_tree(job)
    assert done.returncode == 0, done.stdout + done.stderr
    # THEN steps/ has each rank's hook records and traces/ a trace per rank with distributedInfo
    for rank in (0, 1):
        lines = (tmp_path / "run" / "steps" / f"rank-{rank}.jsonl").read_text().splitlines()
        assert len(lines) > 20 and json.loads(lines[-1])["rank"] == rank
        with gzip.open(tmp_path / "run" / "traces" / f"rank-{rank}.pt.trace.json.gz") as handle:
            trace = json.load(handle)
        assert trace["distributedInfo"]["rank"] == rank
        assert sum(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"]) == 2


@pytest.mark.slow
def test_attach_serves_libkineto_on_demand_traces_without_code_changes(tmp_path: Path) -> None:
    # GIVEN a 2-rank torchrun job started with KINETO_USE_DAEMON=1 and no hook
    job = _launch(tmp_path / "job", 2, {"KINETO_USE_DAEMON": "1"}, [])
    try:
        _wait_workers(job, 2)
        # WHEN attach runs 30 s (libkineto polls every ~10 s and warms up ~6 s)
        done = _attach(job.pid, tmp_path / "run", 30)
    finally:
        _kill_tree(job)
    assert done.returncode == 0, done.stdout + done.stderr
    if "already bound" in done.stdout:
        pytest.skip("a dynolog daemon (or another attach) holds the libkineto socket on this machine")
    # THEN each rank's trace arrived, named by rank, with two optimizer steps in it
    for rank in (0, 1):
        trace = json.loads((tmp_path / "run" / "traces" / f"rank-{rank}.pt.trace.json").read_text())
        steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("Optimizer.step#")]
        assert len(steps) == 2
