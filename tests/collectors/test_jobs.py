"""One job per analysis: traces of different jobs are grouped apart before anything cross-rank.

Real inputs: the HTA trace sets in ../shared/traces/hta (see its PROVENANCE.md), copied into tmp_path
to build the issue's two mixed folders; small project-written traces for the time and id rules.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tracegen import TraceBuilder

from perftracker.collectors.jobs import FAR_APART_NS, TraceJobFacts, group_jobs
from perftracker.collectors.loading import LoadOptions, load_jobs, load_path
from perftracker.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perftracker", "analyze", *args, "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _mixed(hta: Path, tmp: Path, name: str) -> Path:
    """The issue's mixed folders, from real files: `a100x8+v100x2` (trace_diff control: rank 3 of an 8-rank
    A100 job; test: rank 1 of a 2-rank V100 job, 8.5 days later) and `w128+w2` (rank 0 of a 128-rank job
    beside rank 0 of a 2-rank A100 job)."""
    files = {"a100x8+v100x2": ["trace_diff/control/control.json.gz", "trace_diff/test/test.json.gz"],
             "w128+w2": ["trace_filter/sampled_rank-0.json.gz", "nccl_parser_config/nccl_data.json.gz"]}[name]
    folder = tmp / name
    folder.mkdir()
    for rel in files:
        shutil.copy(hta / rel, folder / Path(rel).name)
    return folder


def _ids(out: Path) -> list[str]:
    return [f["id"].split("-")[0] + ":" + f["title"] for f in json.loads((out / "findings.json").read_text())["findings"]]


@pytest.mark.parametrize("name,labels,differ", [
    ("a100x8+v100x2", ["job1-w8-a100-pg509-200", "job2-w2-v100-sxm2-16gb"], ["world size (8 vs 2)", "device", "8.5 days"]),
    ("w128+w2", ["job1-w128", "job2-w2-a100-pg509-200"], ["world size (128 vs 2)"]),
])
def test_a_folder_of_two_jobs_is_refused_naming_both(hta_traces: Path, tmp_path: Path, name: str,
                                                      labels: list[str], differ: list[str]) -> None:
    # GIVEN a folder holding one trace of each of two jobs
    folder = _mixed(hta_traces, tmp_path, name)
    # WHEN it is analyzed
    done = _analyze(str(folder), "-o", str(tmp_path / "out"))
    # THEN analyze stops with exit 2, one line naming both groups, how they differ and how to split them
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip()
    assert message.startswith("perftracker: ") and "\n" not in message
    assert "2 different jobs" in message and all(label in message for label in labels)
    assert all(d in message for d in differ), message
    assert "--job LABEL" in message and "--each-job" in message
    # AND nothing was aligned or compared: no output at all, so no straggler or clock-skew finding
    assert not (tmp_path / "out" / "findings.json").exists()


def test_each_job_analyzes_each_group_alone(hta_traces: Path, tmp_path: Path) -> None:
    # GIVEN the 8-rank A100 + 2-rank V100 folder
    folder = _mixed(hta_traces, tmp_path, "a100x8+v100x2")
    out = tmp_path / "out"
    # WHEN analyzed with --each-job
    done = _analyze(str(folder), "-o", str(out), "--each-job")
    # THEN each job has its own findings.json and report, of its own trace only, and an index lists them
    assert done.returncode == 0, done.stderr
    index = json.loads((out / "jobs.json").read_text())
    assert [j["label"] for j in index["jobs"]] == ["job1-w8-a100-pg509-200", "job2-w2-v100-sxm2-16gb"]
    for job, trace in zip(index["jobs"], ("control.json.gz", "test.json.gz")):
        job_out = out / job["label"]
        assert (job_out / "report.html").is_file()
        document = json.loads((job_out / "findings.json").read_text())
        assert [Path(f).name for f in job["files"]] == [trace]
        titles = " ".join(f["title"] for f in document["findings"]).lower()
        # no cross-job comparison: no straggler, no clock skew
        assert "straggler" not in titles and "skew" not in titles
        assert any("analysis is" in n["message"] and job["label"] in n["message"] for n in document["notes"])
    assert "2 jobs, each analyzed alone" in done.stdout and "job2-w2-v100-sxm2-16gb" in done.stdout


def test_job_picks_one_group(hta_traces: Path, tmp_path: Path) -> None:
    # GIVEN the 128-rank + 2-rank folder
    folder = _mixed(hta_traces, tmp_path, "w128+w2")
    # WHEN one job is picked by its short label, or a label that is not there
    store = load_path(folder, LoadOptions(workers=1, job="job2"))
    # THEN only its trace is loaded, and it is not "1 of 128 ranks"
    assert list(store.ranks["file"].map(lambda f: Path(f).name)) == ["nccl_data.json.gz"]
    assert int(store.ranks["world_size"].max()) == 2
    with pytest.raises(InputError) as err:
        load_path(folder, LoadOptions(workers=1, job="job7"))
    assert "job1-w128" in err.value.message and "job2-w2-a100-pg509-200" in err.value.message


@pytest.mark.parametrize("subset", ["trace_filter", "nccl_parser_config", "trace_diff/control", "cpu_only"])
def test_real_single_job_sets_are_one_group(hta_traces: Path, subset: str) -> None:
    # GIVEN a real trace set of one job  WHEN its jobs are found  THEN there is one
    jobs = list(load_jobs(hta_traces / subset, LoadOptions(workers=1)))
    assert len(jobs) == 1


@pytest.mark.parametrize("sample", ["ddp-gloo-4rank-slow-rank2", "nccl-roce-2node-misconfig", "gloo-4rank-stall-rank2",
                                    "attach-4rank-slow-rank2"])
def test_bundled_samples_are_one_job(sample: str) -> None:
    # GIVEN a bundled sample run  WHEN loaded  THEN it is one job (load_path would refuse several)
    jobs = list(load_jobs(SAMPLES / sample, LoadOptions(workers=1)))
    assert len(jobs) == 1


def _trace(path: Path, rank: int, world: int, base_ns: int | None, extra: dict[str, Any] | None = None) -> Path:
    doc = TraceBuilder(rank=rank, world_size=world).step(1, 0, 100).document()
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    doc.update(extra or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_profiling_windows_of_one_job_hours_apart_stay_one_job(tmp_path: Path) -> None:
    # GIVEN rank 0 and 1 of one job profiled every 20 hours over four days (each gap under a day)
    t0 = 1_700_000_000 * 10**9
    for window in range(5):
        for rank in (0, 1):
            _trace(tmp_path / "t" / f"rank{rank}.w{window}.json.gz", rank, 2, t0 + window * 20 * 3600 * 10**9)
    # WHEN loaded
    store = load_path(tmp_path / "t", LoadOptions(workers=1))
    # THEN it is one job with five windows per rank
    assert sorted(store.ranks.groupby("rank")["window"].nunique()) == [5, 5]


def test_the_same_job_days_apart_is_two_runs(tmp_path: Path) -> None:
    # GIVEN the same 2-rank job run twice, three days apart (ranks 0 and 1 each time)
    t0 = 1_700_000_000 * 10**9
    for run, base in (("a", t0), ("b", t0 + 3 * 86_400 * 10**9)):
        for rank in (0, 1):
            _trace(tmp_path / "t" / f"{run}.rank{rank}.json.gz", rank, 2, base)
    # WHEN analyzed as one folder
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "t", LoadOptions(workers=1))
    # THEN the two runs are told apart by time, and their shared ranks are explained as different jobs
    assert "time (up to 3.0 days apart)" in err.value.message
    assert "ranks 0, 1 appear in more than one of them: ranks of different jobs, not duplicates" in err.value.message


def test_manifest_jobs_and_run_ids_tell_jobs_apart(tmp_path: Path) -> None:
    # GIVEN two run directories side by side, same world size and times, different manifest jobs
    for job in ("job-a", "job-b"):
        run = tmp_path / "runs" / job
        _trace(run / "traces" / "rank-0.pt.trace.json.gz", 0, 2, None)
        (run / "manifest.json").write_text(json.dumps({"job": job}))
    # AND two ranks whose env snapshots carry different TORCHELASTIC_RUN_IDs
    run = tmp_path / "elastic"
    for rank, run_id in ((0, "r1"), (1, "r2")):
        _trace(run / "traces" / f"rank-{rank}.pt.trace.json.gz", rank, 2, None)
        (run / "env").mkdir(parents=True, exist_ok=True)
        (run / "env" / f"rank-{rank}.json").write_text(json.dumps({"env": {"TORCHELASTIC_RUN_ID": run_id}, "rank": rank}))
    # WHEN each folder is analyzed
    # THEN each is refused as two jobs, naming the ids
    for folder, ids in ((tmp_path / "runs", ("job-a", "job-b")), (run, ("r1", "r2"))):
        with pytest.raises(InputError) as err:
            load_path(folder, LoadOptions(workers=1))
        assert "2 different jobs" in err.value.message and all(i in err.value.message for i in ids)


def test_duplicate_rank_in_one_job_says_so(tmp_path: Path) -> None:
    # GIVEN two files of rank 1 of one job, overlapping in time
    TraceBuilder(rank=1).step(1, 0, 100).write(tmp_path / "t" / "a.json")
    TraceBuilder(rank=1).step(1, 50, 100).write(tmp_path / "t" / "b.json")
    # WHEN loaded  THEN the error says they look like one job's rank twice
    with pytest.raises(InputError) as err:
        load_path(tmp_path / "t", LoadOptions(workers=1))
    assert "look like one job's rank twice" in err.value.message


def test_grouping_is_a_function_of_identities() -> None:
    # GIVEN identities: two of an 8-rank A100 job, one that says nothing, one of a 2-rank job, and one
    # with a conflicting process group
    a = TraceJobFacts("a", 0, 8, "NVIDIA A100", (("0", "default_pg", 8),), wall_start_ns=10, wall_end_ns=20)
    b = TraceJobFacts("b", 1, 8, "NVIDIA A100", (("0", "default_pg", 8), ("1", "tp", 2)), wall_start_ns=12,
                      wall_end_ns=22)
    unknown = TraceJobFacts("c", 2)
    other = TraceJobFacts("d", 0, 2, "", wall_start_ns=15, wall_end_ns=25)
    pg = TraceJobFacts("e", 3, 8, "NVIDIA A100", (("1", "tp", 4),), wall_start_ns=14, wall_end_ns=24)
    late = TraceJobFacts("f", 4, 8, "NVIDIA A100", wall_start_ns=22 + FAR_APART_NS + 1, wall_end_ns=30 + FAR_APART_NS)
    # WHEN grouped
    groups = group_jobs([a, b, unknown, other, pg, late])
    # THEN the one that says nothing joins the first job; the others each make their own
    assert sorted(sorted(g.paths) for g in groups) == [["a", "b", "c"], ["d"], ["e"], ["f"]]


def test_thousands_of_traces_with_hundreds_of_process_groups_group_in_linear_time() -> None:
    # GIVEN 4096 ranks' facts, each trace listing the job's 521 process groups (TP 8: 512 TP groups, 8 DP, default)
    groups = tuple((str(i), "default_pg" if i == 0 else "tp" if i <= 512 else "dp", 8) for i in range(521))
    traces = [TraceJobFacts(path=f"rank-{r}.json", rank=r, world_size=4096, device_name="H100",
                            process_groups=groups) for r in range(4096)]
    # WHEN grouped by job (each trace checked against what the group agrees on so far, not against every member:
    # that took hours here)
    jobs = group_jobs(traces)
    # THEN they are one job of 4096 ranks
    assert len(jobs) == 1 and len(jobs[0].ranks) == 4096
