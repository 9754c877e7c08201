"""Step times of an unprepared job: its output files found on its descriptors, the Lightning and torchtitan
line formats, and NCCL Inspector output followed into the run directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.formats.framework_steps import StepLineParser
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.attach.job_outputs import find_job_outputs
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.inspector_sampler import InspectorSampler, inspector_dir, inspector_enabled
from perftracker.live.samplers.steps_sampler import StepsSampler

T0 = 1_750_000_000 * 10**9
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "inspector" / "straggler" / "node-b-pid4105.log"

# A child that holds train.log open for writing and a trace file open too, prints to its stdout (a file or a
# pipe, as the test chooses), and writes torchtitan lines to train.log as the test asks (one per line on stdin).
WRITER = """
import sys, time
log = open(sys.argv[1], "a", buffering=1)
trace = open(sys.argv[2], "w")
print("started", flush=True)
for line in sys.stdin:
    log.write(line)
print("done", flush=True)
"""


def _child(tmp_path: Path, stdout: int | IO[Any] | None) -> subprocess.Popen[str]:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path / "train.log"), str(tmp_path / "t.pt.trace.json")],
                             stdin=subprocess.PIPE, stdout=stdout, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (tmp_path / "t.pt.trace.json").exists():
        time.sleep(0.02)
    return child


def _titan(step: int, stamp: str) -> str:
    # torchtitan's metrics line as printed (github.com/pytorch/torchtitan/pull/3393), colour codes included
    return (f"[titan] 2026-05-18 16:04:{stamp} - root - INFO - \x1b[31mstep: {step}  \x1b[32mloss:  3.24405  "
            "\x1b[33mgrad_norm:  0.8319  \x1b[36mmemory:  9.46GiB(64.99%)  \x1b[34mtps: 7,282  tflops: 0.52  "
            "\x1b[35mmfu: 0.17%\x1b[39m\n")


def test_a_childs_open_log_is_found_and_its_step_lines_read(tmp_path: Path) -> None:
    # GIVEN a real child process with stdout in a file and train.log held open for writing (a trace file too)
    with open(tmp_path / "child.out", "w") as out:
        child = _child(tmp_path, out)
    try:
        # WHEN its descriptors are looked at, and a StepsSampler follows it as worker rank 3
        found = find_job_outputs([child.pid], exclude=[tmp_path / "run"])
        me = Worker(rank=3, local_rank=3, pid=child.pid, host="h", cmdline="x", run_id="", world_size=4, parent=1)
        ctx = LiveContext(run_dir=tmp_path / "run", job=Job([me]), host="h")
        sampler = StepsSampler()
        sampler.start(ctx)
        assert child.stdin is not None
        for step, stamp in ((14, "46,338"), (15, "47,456"), (16, "48,577")):
            child.stdin.write(_titan(step, stamp))
        child.stdin.flush()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sampler.log_records < 2:
            time.sleep(0.05)
            sampler.sample(ctx)
        sampler.stop(ctx)
    finally:
        child.kill()
        child.wait()
    # THEN stdout and train.log are found (not the trace), and the steps land in steps/rank-3.jsonl, timed by
    # the lines' own timestamps, saying where they came from; a note names the files
    assert sorted(f.path.name for f in found.files) == ["child.out", "train.log"] and found.pipes == []
    records = [json.loads(x) for x in (tmp_path / "run" / "steps" / "rank-3.jsonl").read_text().splitlines()]
    assert [(r["step"], r["format"], r["source"]) for r in records] == [(15, "torchtitan", "job-output"),
                                                                       (16, "torchtitan", "job-output")]
    assert records[0]["end_ns"] - records[0]["start_ns"] == 1_118_000_000
    assert any("train.log" in n and "job's own output" in n for n in ctx.notes)


def test_a_pipe_is_reported_and_never_read(tmp_path: Path) -> None:
    # GIVEN a child whose stdout is a pipe: first read by this process (as `perftracker run` reads the job's
    # output), then handed to another reader (`cat`, as a terminal, tee or a scheduler would be)
    child = _child(tmp_path, subprocess.PIPE)
    assert child.stdout is not None
    reader: subprocess.Popen[bytes] | None = None
    try:
        # WHEN its descriptors are looked at in each case
        while_ours = find_job_outputs([child.pid])
        reader = subprocess.Popen(["cat"], stdin=child.stdout, stdout=subprocess.DEVNULL)
        child.stdout.close()
        theirs = find_job_outputs([child.pid])
    finally:
        child.kill()
        child.wait()
        if reader is not None:
            reader.kill()
            reader.wait()
    # THEN the pipe is told apart (ours, or someone else's: listed, never opened); the log it holds is found
    assert [fd for _, fd, _ in while_ours.ours] == [1] and while_ours.pipes == []
    assert [(fd, what.startswith("pipe:")) for _, fd, what in theirs.pipes] == [(1, True)] and theirs.ours == []
    assert [f.path.name for f in theirs.files] == ["train.log"]


def test_lightning_and_torchtitan_lines_as_the_projects_print_them() -> None:
    # GIVEN real lines: Lightning's bar (Lightning-AI/pytorch-lightning issues #3866 and #4225, ecmwf/anemoi-core
    # #614: a later epoch, a validation bar), torchtitan's metrics line (pytorch/torchtitan PR #950, a
    # `validate step:` line of torchtitan/components/metrics.py)
    parser = StepLineParser()
    lightning = [
        "Epoch 0:  93% 1586/1702 [12:50<00:56,  2.06it/s, loss=0.158, v_num=0, train_loss=0.149]",
        "Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=10.072, v_num=193315]",
        "Epoch 1:   0%|          | 3/1702 [00:01<12:00,  2.50it/s, v_num=35a4, ...]",
        "Validation DataLoader 1: 100% 1000/1000 [00:18<00:00, 55.55it/s]",
    ]
    got = [parser.feed(line, T0) for line in lightning]
    titan = StepLineParser()
    first = titan.feed("[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  memory:  "
                       "1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%", T0)
    second = titan.feed("[rank0]:[titan] 2025-03-12 11:10:21,589 - root - INFO - step: 23  loss:  6.2236  memory:  "
                        "1.41GiB(1.79%)  tps: 212,462  tflops: 20.12  mfu: 2.03%", T0)
    validate = titan.feed("[rank0]:[titan] 2025-03-12 11:10:22,000 - root - INFO - validate step: 24  loss:  6.1  "
                          "memory:  1.41GiB(1.79%)  tps: 212,462", T0)
    # THEN Lightning steps count across epochs (epoch * batches + batch) with tqdm's rate, the earlier step and
    # the validation bar are not steps; torchtitan's step time is the difference of its lines' timestamps
    assert got[0] is not None and (got[0]["step"], got[0]["format"]) == (1586, "lightning")
    assert got[0]["end_ns"] - got[0]["start_ns"] == round(1e9 / 2.06)
    assert got[1] is None and got[3] is None
    assert got[2] is not None and got[2]["step"] == 1702 + 3
    assert first is None and second is not None and (second["rank"], second["step"]) == (0, 23)
    assert second["end_ns"] - second["start_ns"] == 78_000_000 and validate is None


def test_inspector_output_of_a_worker_is_followed_into_the_run_directory(tmp_path: Path) -> None:
    # GIVEN a child process whose environment enables the Inspector plugin, writing its records where NCCL would
    env = {**os.environ, "NCCL_PROFILER_PLUGIN": "/opt/nccl/libnccl-profiler-inspector.so", "NCCL_INSPECTOR_ENABLE": "1",
           "NCCL_INSPECTOR_DUMP_DIR": str(tmp_path / "insp"), "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS": "1000"}
    (tmp_path / "insp").mkdir()
    lines = FIXTURE.read_text().splitlines(keepends=True)
    script = ("import os, socket, sys\n"
              "path = os.path.join(sys.argv[1], f'{socket.gethostname()}-pid{os.getpid()}.log')\n"
              "with open(path, 'w') as out:\n"
              "    for line in sys.stdin:\n        out.write(line); out.flush()\n"
              "    sys.stdin.close()\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "insp")], stdin=subprocess.PIPE, env=env,
                             text=True)
    me = Worker(rank=5, local_rank=1, pid=child.pid, host="h", cmdline="x", run_id="", world_size=8, parent=1)
    ctx = LiveContext(run_dir=tmp_path / "run", job=Job([me]), host="h")
    sampler = InspectorSampler()
    try:
        time.sleep(0.3)
        sampler.start(ctx)
        assert child.stdin is not None
        child.stdin.write("".join(lines[:20]) + lines[20][:50])  # the 21st line half written
        child.stdin.flush()
        written = tmp_path / "insp" / f"{socket.gethostname()}-pid{child.pid}.log"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not written.exists() or written.stat().st_size < 50):
            time.sleep(0.05)
        time.sleep(0.2)
        # WHEN sampled while the last line is half written
        sampler.sample(ctx)
    finally:
        child.kill()
        child.wait()
    # THEN the complete lines are in the run directory's inspector/ folder, and analyze reads them as rank 5's
    copies = list((tmp_path / "run" / "inspector").glob("*.log"))
    assert len(copies) == 1 and copies[0].read_text() == "".join(lines[:20]) and ctx.notes == []
    table = load_path(tmp_path / "run", LoadOptions(cache_dir=None, workers=1))["nccl_collectives"]
    assert len(table) == 20 and set(table["pid"]) == {4105}
    # and the environment rules are NCCL's: off without the plugin or with Prometheus output; the default folder
    assert not inspector_enabled({"NCCL_INSPECTOR_ENABLE": "1"})
    assert not inspector_enabled({**env, "NCCL_INSPECTOR_PROM_DUMP": "1"}) and inspector_enabled(env)
    assert inspector_dir({"SLURM_JOBID": "77"}) == Path("nccl-inspector-77")
    assert inspector_dir({}) == Path("nccl-inspector-unknown-jobid")
    quiet = LiveContext(run_dir=tmp_path / "run2", job=Job([]), host="h")
    InspectorSampler().start(quiet)
    assert len(quiet.notes) == 1 and "NCCL_INSPECTOR_ENABLE=1" in quiet.notes[0]
