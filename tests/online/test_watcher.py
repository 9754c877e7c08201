"""The live watcher (live/watch/watcher.py) with a stand-in diagnosis: arming, incidents and their rate limits and disk cap,
the metrics of --prom, and `perftracker incidents`."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from perftracker.cli import app
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.diagnosis import Look, NoDiagnosis
from perftracker.live.sampler import LiveContext
from perftracker.live.watch.incidents import CapturePlan, IncidentVerdict, capture_incident
from perftracker.live.watch.prom import PromPublisher, metrics_text
from perftracker.live.watch.watcher import WatchOptions, WatchSampler
from perftracker.store import Store
from perftracker.store.alarms import Alarm, StepSeries


class SlowAfter(NoDiagnosis):
    """Says "degradation" once a series holds a step at or after `step`."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.asked = 0

    def degradation_alarm(self, series: Sequence[StepSeries], window: int, rise: float) -> Alarm | None:
        self.asked += 1
        if any(len(s.steps) and s.steps[-1] >= self.step for s in series):
            return Alarm("degradation", f"slower since step {self.step}", ranks=(1,), step=self.step)
        return None

    def hang_pattern(self, look: Look) -> str:
        return ""

    def host_alarm(self, store: Store) -> Alarm | None:
        return None

    def straggler_suspicion(self, profile_samples: pd.DataFrame) -> str:
        return ""

    def hang_alarm(self, last_step: Mapping[int, int], last_step_ns: Mapping[int, int], median_step_ns: int | None,
                   steps_known: int, now_ns: int) -> Alarm | None:
        return None


def _ctx(tmp_path: Path, diagnosis: NoDiagnosis) -> LiveContext:
    job = Job(launcher_pid=os.getpid(), workers=[Worker(rank=r, local_rank=r, pid=os.getpid(), host="node-a",
                                                        cmdline="train.py", run_id="", world_size=2, parent=1)
                                                 for r in range(2)])
    return LiveContext(run_dir=tmp_path / "run", job=job, host="node-a", diagnosis=diagnosis)


def _write_steps(ctx: LiveContext, first: int, last: int) -> None:
    for rank in range(2):
        path = ctx.run_dir / "steps" / f"rank-{rank}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as out:
            for step in range(first, last):
                start = 10**18 + step * 50_000_000
                out.write(json.dumps({"rank": rank, "step": step, "start_ns": start, "end_ns": start + 50_000_000}) + "\n")


def _reporter(evidence: Path, out: Path) -> IncidentVerdict:
    (out / "report.html").write_text("report")
    return IncidentVerdict("1 warning. Top: rank 1", (1,), ("node-a",), str(out / "report.html"))


def _options(**kw: object) -> WatchOptions:
    base: dict[str, object] = {"profile_seconds": 0, "baseline_seconds": 0, "trace_steps": 0, "reporter": _reporter}
    base.update(kw)
    return WatchOptions(**base)  # type: ignore[arg-type]


def _settle(watch: WatchSampler) -> None:
    for thread in (watch._capture, watch._baseline):
        if thread is not None:
            thread.join(timeout=20)


def test_the_watcher_arms_on_the_history_and_opens_one_analyzed_incident(tmp_path: Path) -> None:
    # GIVEN a run directory whose step files already hold 30 steps (the hook's history), and a diagnosis
    # that says "slower" from step 40
    diagnosis = SlowAfter(40)
    ctx = _ctx(tmp_path, diagnosis)
    _write_steps(ctx, 0, 30)
    watch = WatchSampler(options=_options())
    watch.start(ctx)
    # WHEN it samples once: THEN it is armed at once, with the baseline recorded, and no incident
    watch.sample(ctx)
    _settle(watch)
    assert watch.state.armed and watch.state.baseline == "ready"
    assert (ctx.run_dir / "incidents" / "baseline-node-a" / "steps" / "rank-0.jsonl").is_file()
    assert not list((ctx.run_dir / "incidents").glob("*-degradation-*"))
    assert "armed" in watch.status() and "no incident" in watch.status()
    # WHEN later steps come and the rule fires (twice)
    _write_steps(ctx, 30, 45)
    watch.sample(ctx)
    _settle(watch)
    _write_steps(ctx, 45, 80)
    watch.sample(ctx)
    _settle(watch)
    # THEN one incident opened (the cooldown holds the second), with its evidence, verdict and report
    folders = list((ctx.run_dir / "incidents").glob("*-degradation-*"))
    assert len(folders) == 1 and watch.state.suppressed == 1  # the second alarm came within the cooldown
    record = json.loads((folders[0] / "incident.json").read_text())
    assert record["state"] == "done" and record["step"] == 40 and record["named_ranks"] == [1]
    assert record["report"].endswith("report.html")
    assert (folders[0] / "evidence" / "steps" / "rank-1.jsonl").is_file()
    assert (folders[0] / "evidence" / "manifest.json").is_file()
    assert "1 incident(s): degradation" in watch.status()
    watch.stop(ctx)
    # AND `perftracker incidents` lists it, one line, with its report
    result = CliRunner().invoke(app, ["incidents", str(ctx.run_dir)])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "degradation" in lines[0] and "step 40" in lines[0] and "ranks 1" in lines[0]
    assert lines[0].endswith("report.html")


def test_two_nodes_watchers_sharing_a_run_directory_keep_their_incidents_and_baselines_apart(tmp_path: Path) -> None:
    # GIVEN the watchers of two nodes writing into one shared run directory, both rules firing in the same second
    contexts = []
    for host in ("node-a", "node-b"):
        ctx = _ctx(tmp_path, SlowAfter(40))
        ctx.host = host
        contexts.append(ctx)
    _write_steps(contexts[0], 0, 45)
    watches = [WatchSampler(options=_options()) for _ in contexts]
    # WHEN each samples once (armed at once on the history, a baseline each, then an incident each)
    for watch, ctx in zip(watches, contexts):
        watch.start(ctx)
        watch.sample(ctx)
    for watch in watches:
        _settle(watch)
    # THEN each node has its own baseline and its own incident, named by the host that watched it
    run = contexts[0].run_dir
    assert sorted(p.name for p in (run / "incidents").glob("baseline-*")) == ["baseline-node-a", "baseline-node-b"]
    folders = sorted((run / "incidents").glob("*-degradation-*"))
    assert [f.name.rsplit("-", 2)[-2:] for f in folders] == [["node", "a"], ["node", "b"]]
    assert sorted(json.loads((f / "incident.json").read_text())["watched_from"] for f in folders) == ["node-a",
                                                                                                    "node-b"]
    for watch, ctx in zip(watches, contexts):
        watch.stop(ctx)


def test_step_times_of_the_job_from_one_log_arm_the_watcher(tmp_path: Path) -> None:
    # GIVEN an unhooked job's step records from rank 0's log lines: rank -1, the job as a whole (rank--1.jsonl)
    ctx = _ctx(tmp_path, SlowAfter(10**6))
    path = ctx.run_dir / "steps" / "rank--1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"rank": -1, "step": s, "start_ns": 10**18 + s * 50_000_000,
                                        "end_ns": 10**18 + (s + 1) * 50_000_000, "source": "job-output"}) + "\n"
                            for s in range(30)))
    watch = WatchSampler(options=_options())
    watch.start(ctx)
    # WHEN it samples, THEN the job's series is read and the rules arm on it
    watch.sample(ctx)
    _settle(watch)
    assert [s.rank for s in watch.series()] == [-1] and watch.state.armed
    watch.stop(ctx)


def test_cooldown_and_disk_cap_limit_incidents(tmp_path: Path) -> None:
    # GIVEN a rule that fires at every look, a cooldown of an hour and a total cap already reached
    ctx = _ctx(tmp_path, SlowAfter(0))
    (ctx.run_dir / "incidents" / "old").mkdir(parents=True)
    (ctx.run_dir / "incidents" / "old" / "big").write_bytes(b"x" * 2048)
    watch = WatchSampler(options=_options(total_cap_bytes=1024, cooldown_s=3600))
    watch.start(ctx)
    for first in (0, 30, 60):
        _write_steps(ctx, first, first + 30)
        watch.sample(ctx)
        _settle(watch)
    # THEN one incident is recorded, with its trigger only (the oldest are kept), and the others are held back
    folders = list((ctx.run_dir / "incidents").glob("*-degradation-*"))
    assert len(folders) == 1
    record = json.loads((folders[0] / "incident.json").read_text())
    assert record["state"] == "not captured" and "oldest incidents are kept" in record["notes"][0]
    assert not (folders[0] / "evidence").exists()
    assert watch.state.suppressed >= 1


def test_prom_metrics_as_a_file_and_an_endpoint(tmp_path: Path) -> None:
    # GIVEN a watch state with two ranks, one behind, and one incident
    watch = WatchSampler()
    state = watch.state
    state.armed, state.current_s, state.last_step = True, {0: 0.05, 1: 0.08}, {0: 120, 1: 118}
    state.incidents.append((1_796_000_000.0, "degradation", "x"))
    text = metrics_text(state)
    # THEN the postmortem name is used where they overlap, and lag and incidents are there
    assert "perftracker_step_time_seconds" in text
    assert 'perftracker_rank_lag_steps{rank="1"} 2' in text
    assert 'perftracker_incidents_total{kind="degradation"} 1' in text
    assert 'perftracker_incidents_total{kind="hang"} 0' in text
    assert "perftracker_last_incident_timestamp_seconds 1.796e+09" in text
    # AND a file target is rewritten, a :PORT target served on 127.0.0.1
    file_target = PromPublisher(str(tmp_path / "m.prom"))
    file_target(state)
    assert (tmp_path / "m.prom").read_text() == text
    served = PromPublisher(":0")
    try:
        assert served.server is not None
        port = served.server.server_address[1]
        served(state)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert body == text
    finally:
        served.close()
    assert time.time() > 0


def test_incidents_of_a_run_without_any(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["incidents", str(tmp_path)])
    assert result.exit_code == 0 and "No incidents" in result.output
    missing = CliRunner().invoke(app, ["incidents", str(tmp_path / "nope")])
    assert missing.exit_code == 2


def test_a_capture_interrupted_by_the_session_end_keeps_its_evidence_and_is_analyzed(tmp_path: Path) -> None:
    # GIVEN a run with steps, and the session already stopping (Ctrl-C / SIGTERM / the job ended)
    ctx = _ctx(tmp_path, NoDiagnosis())
    _write_steps(ctx, 0, 40)
    stop = threading.Event()
    stop.set()
    folder = ctx.run_dir / "incidents" / "x-degradation"
    # WHEN an incident is captured
    record = capture_incident(ctx, Alarm("degradation", "slower", ranks=(1,), step=30), folder,
                              CapturePlan(profile_seconds=0, trace_steps=0), None, _reporter, stop)
    # THEN what was captured is kept, analyzed, and the incident says it was interrupted
    assert record.state == "interrupted" and record.report.endswith("report.html")
    saved = json.loads((folder / "incident.json").read_text())
    assert saved["state"] == "interrupted" and "session ended during the capture" in saved["notes"][-1]
    assert (folder / "evidence" / "steps" / "rank-0.jsonl").read_text().count("\n") == 40


def test_bad_watch_options_are_said_before_any_work(tmp_path: Path) -> None:
    # GIVEN attach --watch with a rise of 0, a window of 1, or --prom naming a folder
    runner = CliRunner()
    for extra in (["--watch-rise", "0"], ["--watch-window", "1"], ["--prom", str(tmp_path)]):
        result = runner.invoke(app, ["attach", "pid:1", "-o", str(tmp_path / "run"), "--watch", *extra])
        # THEN exit 2 with one line naming the option, and no run directory made
        assert result.exit_code == 2, (extra, result.output)
        assert "perftracker:" in result.output
    assert not (tmp_path / "run").exists()
