"""Stragglers of unprepared jobs, from py-spy record of every rank (`attach --profile-seconds`).

Fixtures in tests/fixtures/profiles/ are real: `perftracker attach` on real 4-rank torchrun jobs
(gloo, CPU, width 256, batch 1024), one with rank 2 slowed 3x in its forward (slow-rank2), one clean.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.stack_profile import analyze_stack_profile, is_user_frame
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.collectors.stacks.samples import parse_raw
from tests.live.conftest import attach_command, launch_job, stop_job, wait_steps, wait_workers

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
MAIN = "thread (11): MainThread;<module> (train.py:90);main (train.py:50)"


def _run_dir(tmp_path: Path, files: dict[str, str] | None = None, fixture: str = "") -> Path:
    run = tmp_path / "run"
    (run / "profiles").mkdir(parents=True)
    if fixture:
        for p in (FIXTURES / fixture).iterdir():
            shutil.copy(p, run / "profiles" / p.name)
    for name, text in (files or {}).items():
        (run / "profiles" / name).write_text(text)
    return run


def _findings(run: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = load_path(run, LoadOptions(cache_dir=None))
    return store, analyze_stack_profile(Analysis(store))


def test_raw_lines_with_thread_and_process_prefixes_parse_and_junk_is_counted() -> None:
    # GIVEN py-spy raw lines (with --threads, one with --subprocesses) and two lines that are not
    lines = [f"{MAIN};step (train.py:20) 7", 'process 5:"python train.py";thread (12): loader;next (dl.py:3) 2',
             "garbage", "no count here x", ""]
    # WHEN parsed
    rows, bad = parse_raw(lines)
    # THEN thread names and stacks come out root first, counts as ints, junk counted not fatal
    assert rows == [("MainThread", "<module> (train.py:90);main (train.py:50);step (train.py:20)", 7),
                    ("loader", "next (dl.py:3)", 2)]
    assert bad == 2


def test_user_frames_are_the_jobs_own_code() -> None:
    assert is_user_frame("SlowableMLP.forward (sample_job.py:93)")
    assert is_user_frame("pretrain (megatron/training.py:88)")
    assert not is_user_frame("Module._call_impl (torch/nn/modules/module.py:1789)")
    assert not is_user_frame("wait (threading.py:331)")
    assert not is_user_frame("<listcomp> (<frozen importlib._bootstrap>:1)")


def test_real_profiles_name_the_slowed_rank_and_where_the_others_wait(tmp_path: Path) -> None:
    # GIVEN the profiles attach recorded on a real job whose rank 2 does 3x the forward compute
    run = _run_dir(tmp_path, fixture="slow-rank2")
    # WHEN analyzed
    store, findings = _findings(run, tmp_path)
    # THEN one warning names rank 2, the job's own frame where its time goes, and the backward wait of the others
    assert [f.ranks for f in findings] == [(2,)]
    f = findings[0]
    assert f.evidence["frame"] == "SlowableMLP.forward (sample_job.py:93)"
    assert f.evidence["share"] > 0.2 and f.evidence["median_share"] < 0.05
    assert "_engine_run_backward" in f.evidence["others_instead"]
    assert f.title.startswith("Rank 2 spends")
    assert f.hosts == ("vm",)


def test_real_profiles_of_a_clean_job_give_no_finding(tmp_path: Path) -> None:
    # GIVEN the profiles of a real job with no slowed rank (4 ranks on 2 busy cores)
    run = _run_dir(tmp_path, fixture="clean")
    # WHEN analyzed  THEN nobody is called a straggler
    assert _findings(run, tmp_path)[1] == []


_SHARED_FRAMES = """import sys
from pathlib import Path
from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.stragglers.stack_profile import profile_shares_view
from perftracker.collectors.loading import LoadOptions, load_path
view = profile_shares_view(Analysis(load_path(Path(sys.argv[1]), LoadOptions(cache_dir=None, workers=1))))
print(view["frame"].drop_duplicates().tolist())
"""


def test_the_frames_compared_across_ranks_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    # GIVEN real profiles of a 4-rank job in which several frames differ between ranks by the same share
    run = tmp_path / "run"
    shutil.copytree(FIXTURES.parent / "accuracy" / "inproc-rank2-x5-16" / "profiles", run / "profiles")
    # WHEN the frames the report compares are computed in two interpreters with different string hashes
    shown = [subprocess.run([sys.executable, "-c", _SHARED_FRAMES, str(run)], capture_output=True, text=True,
                            check=True, cwd=FIXTURES.parents[2], env={**os.environ, "PYTHONHASHSEED": seed}).stdout
             for seed in ("1", "3")]
    # THEN they are the same frames in the same order (ties in spread broken by the frame, not by set order)
    assert shown[0] == shown[1] and shown[0].startswith("[")


def test_live_suspicion_names_the_slowed_rank_once_the_recording_ends(tmp_path: Path) -> None:
    from perftracker.analyzers.online import AnalyzerDiagnosis
    from perftracker.collectors.stacks.samples import load_profile_inputs

    def straggler_suspicion(paths: list[Path]) -> str:  # what ProfileSampler asks the CLI's diagnosis
        return AnalyzerDiagnosis().straggler_suspicion(load_profile_inputs(paths)[0])

    # GIVEN the recordings of the slowed job and of the clean job
    slow = sorted(_run_dir(tmp_path / "slow", fixture="slow-rank2").glob("profiles/*.txt"))
    clean = sorted(_run_dir(tmp_path / "clean", fixture="clean").glob("profiles/*.txt"))
    # WHEN the live panel's suspicion is computed from them
    # THEN it names rank 2 for the slowed job, and nothing for the clean one
    assert straggler_suspicion(slow).startswith("Rank 2 spends")
    assert straggler_suspicion(clean) == ""


def _profile(work: int, wait: int) -> str:
    return f"{MAIN};forward (train.py:30) {work}\n{MAIN};wait (torch/distributed/c10d.py:9) {wait}\n"


def test_too_few_ranks_or_too_many_outliers_give_no_finding(tmp_path: Path) -> None:
    # GIVEN two ranks only, one very different
    run = _run_dir(tmp_path / "a", {"rank-0.txt": _profile(20, 80), "rank-1.txt": _profile(90, 10)})
    # THEN two ranks are too few to say which one is odd
    assert _findings(run, tmp_path / "a")[1] == []
    # GIVEN four ranks of which two differ from the other two: no healthy majority
    run = _run_dir(tmp_path / "b", {"rank-0.txt": _profile(20, 80), "rank-1.txt": _profile(20, 80),
                                    "rank-2.txt": _profile(90, 10), "rank-3.txt": _profile(90, 10)})
    assert _findings(run, tmp_path / "b")[1] == []
    # GIVEN four ranks of which one differs, with a corrupt fifth file
    run = _run_dir(tmp_path / "c", {"rank-0.txt": _profile(20, 80), "rank-1.txt": _profile(22, 78),
                                    "rank-2.txt": _profile(90, 10), "rank-3.txt": _profile(19, 81),
                                    "rank-4.txt": "\x00\x01 not py-spy\n"})
    store, found = _findings(run, tmp_path / "c")
    # THEN rank 2 is named and the corrupt file is a note, not a failure
    assert [f.ranks for f in found] == [(2,)] and found[0].evidence["frame"] == "forward (train.py:30)"
    assert any("rank-4.txt" in n.source for n in store.notes)


SLOW_JOB = ["--steps", "100000", "--width", "256", "--batch", "1024"]


@pytest.mark.slow
@pytest.mark.parametrize("slow", [True], ids=["rank2-slowed"])
def test_attach_finds_the_straggler_of_an_unprepared_job(tmp_path: Path, slow: bool) -> None:
    # GIVEN a real 4-rank torchrun job without hook, profiler or NCCL_DEBUG, with rank 2 slowed 3x
    # (clean jobs: the py-spy recordings of the 21 clean runs of the accuracy corpus, judged in
    # tests/analyzers/stragglers/test_accuracy_corpus.py, cover far more layouts than one fresh clean run here could)
    job = launch_job(tmp_path / "job", 4, [*SLOW_JOB, *(["--slow-rank", "2", "--slow-factor", "3"] if slow else [])])
    try:
        wait_workers(job, 4)
        wait_steps(tmp_path / "job", 0, 2, timeout=60)
        # WHEN attach runs at default settings by the launcher's pid
        out = tmp_path / "run"
        res = subprocess.run(attach_command(f"{job.pid}", out, 15), capture_output=True, text=True, check=False,
                             timeout=120)
    finally:
        stop_job(job)
    # THEN every rank was recorded, and the verdict names rank 2 only when it was slowed
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in (out / "profiles").glob("*.txt")) == [f"rank-{r}.txt" for r in range(4)]
    doc = json.loads((out / "perftracker-out" / "findings.json").read_text())
    found = [f for f in doc["findings"] if f["analyzer"] == "stack_profile"]
    if slow:
        assert [f["ranks"] for f in found] == [[2]], found
        assert found[0]["evidence"]["frame"] == f"SlowableMLP.forward (sample_job.py:{_extra_pass_line()})"
        assert doc["summary"]["verdict"].startswith("1 warning. Top: Rank 2 spends")
    else:
        assert found == [], found


def _fake_pyspy(tmp_path: Path, body: str) -> str:
    script = tmp_path / "py-spy"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


def _sampler_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str):  # type: ignore[no-untyped-def]
    import sys as _sys

    from perftracker.live.attach.discovery import Job, Worker
    from perftracker.live.sampler import LiveContext
    from perftracker.live.samplers import profile_sampler

    monkeypatch.setattr(profile_sampler, "find_pyspy", lambda: _fake_pyspy(tmp_path, body))
    worker = Worker(rank=5, local_rank=1, pid=os.getpid(), host="h", cmdline=_sys.executable, run_id="r",
                    world_size=8, parent=1)
    ctx = LiveContext(run_dir=tmp_path / "run", job=Job([worker]), host="node-9")
    sampler = profile_sampler.ProfileSampler(seconds=1, delay_s=0)
    sampler.start(ctx)
    sampler.sample(ctx)  # launches the recorder
    deadline = time.monotonic() + 10
    while "recorded" not in sampler.status() and time.monotonic() < deadline:
        time.sleep(0.1)
        sampler.sample(ctx)
    return ctx, sampler


def test_profile_sampler_writes_the_recording_and_its_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a py-spy that records (writes raw output where --output says)
    body = 'while [ "$1" != "--output" ]; do shift; done; echo "thread (1): MainThread;main (t.py:1) 20" > "$2"\n'
    # WHEN the sampler runs for one rank
    ctx, sampler = _sampler_run(tmp_path, monkeypatch, body)
    # THEN the recording and a sidecar naming rank, pid, host and rate are in profiles/
    meta = json.loads((ctx.run_dir / "profiles" / "rank-5.json").read_text())
    assert meta["rank"] == 5 and meta["pid"] == os.getpid() and meta["host"] == "node-9" and meta["rate_hz"] == 20
    assert sampler.status().startswith("1 of 1 rank(s) recorded") and not ctx.notes


def test_profile_sampler_explains_a_permission_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a py-spy that is not allowed to read the process
    body = 'echo "Permission Denied: Try running again with elevated permissions" >&2; exit 1\n'
    # WHEN the sampler runs
    ctx, sampler = _sampler_run(tmp_path, monkeypatch, body)
    # THEN nothing is claimed and the note says what to do
    assert sampler.status().startswith("0 of 1 rank(s) recorded")
    assert any("no permission to sample rank 5" in n and "CAP_SYS_PTRACE" in n for n in ctx.notes), ctx.notes


def test_report_section_compares_ranks_and_escapes_stack_text(tmp_path: Path) -> None:
    from perftracker.analyzers.views import report_tables
    from perftracker.reports.html import render_section
    from perftracker.reports.trace_sections import profile_section

    # GIVEN sampled stacks whose frame text carries markup (stack content is untrusted)
    evil = "thread (1): MainThread;<img src=x onerror=alert(1)> (evil.py:1)"
    run = _run_dir(tmp_path, {f"rank-{r}.txt": f"{evil} {90 if r == 2 else 10}\n{MAIN} {10 if r == 2 else 90}\n"
                              for r in range(4)})
    analysis = Analysis(load_path(run, LoadOptions(cache_dir=None)))
    findings = analyze_stack_profile(analysis)
    # WHEN the report section is built from the report views and rendered
    section = profile_section(report_tables(analysis), findings)
    assert section is not None and section.key == "profile"
    html = render_section(section)
    # THEN it shows the frame that differs, escaped in the HTML and in the chart labels and hover text,
    # and the finding
    trace = section.figures[0]["data"][0]
    labels = trace["y"]
    assert "&lt;img src=x onerror=alert(1)&gt; (evil.py:1)" in labels and not any("<img" in str(y) for y in labels)
    assert not any("<img" in str(t) for row in trace["hovertext"] for t in row)
    assert "<img" not in html and "Rank 2 spends" in html


def _extra_pass_line() -> int:
    """The line of the slowed rank's extra pass in today's scripts/sample_job.py (the recordings say 93)."""
    lines = (Path(__file__).resolve().parents[3] / "scripts" / "sample_job.py").read_text().splitlines()
    return lines.index("                    self.head(self.body(x[:rows]))") + 1
