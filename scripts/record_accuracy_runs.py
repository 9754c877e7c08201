"""Record the real-job accuracy corpus: clean and slowed 4-rank torchrun jobs, kept as run directories.

Promise: ``python scripts/record_accuracy_runs.py [--only NAME,...] [--scenarios clean,hog,...]
[--count N] [--out DIR] [--replace]`` runs the planned jobs (``PLAN`` below; each a real 4-rank
CPU/gloo DDP job, ``scripts/sample_job_runner.run_job``) and keeps each one as
``DIR/<name>/`` (default ``tests/fixtures/accuracy``): ``manifest.json``, ``traces/`` (gzip'd,
trimmed, see ``trim_trace``), ``steps/``, ``env/`` and ``profiles/`` (py-spy stacks of every rank
from the end of the lead-in steps, for the ``stack_profile`` analyzer). ``DIR/runs.json`` lists every run:
name, scenario, layout, profiled steps, the slowed rank (null for a clean run) and how it was
slowed, whether the slowed rank is expected to be named (``expect_named``; false, with
``expect_named_why``, for a slowdown this machine does not make real), when it was recorded, the job parameters and the command that regenerates it, and what the
step files show (per-rank median forward and step time over the profiled steps). Re-recording a
run replaces its directory and its entry; other entries are kept. A run that is already recorded is
skipped unless ``--replace``.

Scenarios (the truth the accuracy measurement, ``scripts/measure_accuracy.py``, checks against):

* ``clean``: no single rank slowed. Layouts: ``unpinned``; ``pinned-2x2`` (two ranks per core);
  ``pair-pinned`` (two ranks share a core, the others run free: that pair is slow *together*, a
  group, not a straggler); ``pinned-3+1`` (three ranks on one core, one alone); background load
  (``BackgroundLoad`` hogs tied to no rank, steady or bursty, anywhere or on one core). The
  ``repro`` runs are the issue's repro: the bundled sample's model (width 512, depth 3, batch 128,
  two gradient buckets per step) with 6 profiled steps.
* ``hog``: ``disturb.CoreContention``: busy loops pinned to the slowed rank's core, that rank pinned
  alone with them, the other ranks on the other core. With 4 loops the rank gets 1/5 of its core
  against 1/3 for the three others (1.41-1.47x forward as recorded); with 16 loops 1/17 against 1/3.
* ``inproc``: the job's ``--slow-rank/--slow-factor``: the slowed rank's forward does F times the work.
* ``stop``: ``disturb.DutyCycle``: the slowed rank's process SIGSTOPped 90% of every 20 ms from outside
  (``STOP_SHARE``, ``STOP_PERIOD_S``; 80% was not always enough under load): the slowdown a fresh CI
  job checked before these runs replaced it (``tests/analyzers/stragglers/test_duty_cycle.py``).
* ``quota``: ``disturb.CpuQuota(share)``: the slowed rank's threads held to `share` of one core. Here
  4 ranks share 2 cores, so each rank already gets about half a core: a share of 0.5 does not bind
  (0.88-1.34x forward as recorded) and those runs are kept with ``expect_named: false``
  (``NOT_BINDING_HALF_CORE``); the runs that test detection use 0.05 of a core (``BINDING_QUOTA_SHARE``:
  below what a rank gets even while other work loads the machine).

``expect_named`` (null for clean runs) is the plan's word, set before recording, never from the outcome;
``save_index`` writes it from the plan into every entry the plan names, so changing it in the plan and
saving the index (any recording, or ``--reindex``) updates runs.json without re-recording.

This machine has 2 cores shared with other work (other test runs); that is background noise the
clean runs include, and runs.json says so. Jobs are sized like the fresh straggler job CI once ran
(batch x width compute-bound, one gradient all-reduce per step) but with one hidden layer (depth 1)
and a bigger batch, so a trace holds fewer events per step and the corpus stays small.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from disturb import BackgroundLoad, CoreContention, CpuQuota, DutyCycle, Pinning, Together
from sample_job_runner import REPO, run_job

CORPUS = REPO / "tests" / "fixtures" / "accuracy"
RUNS_JSON = "runs.json"
NPROC = 4
SCENARIOS = ("clean", "hog", "inproc", "quota", "stop")
LEAD_IN_STEPS = 6  # steps before the profiler's wait/warmup steps (start-up, caches)
MIN_STEPS = 20  # the degradation analyzer looks at 20+ steps
TIMEOUT_S = 240.0
PYSPY_RATE_HZ = 50  # the stack_profile analyzer judges ranks with 50+ samples

# Trace content no analyzer reads (record_shapes detail, per-op ids), and the forward/backward flow
# arrows the loader skips: dropped so the corpus stays small. Everything else is kept as written.
DROPPED_ARGS = frozenset({"Input type", "Input Dims", "Concrete Inputs", "Input Strides", "Ev Idx",
                          "Record function id", "Sequence number", "Fwd thread id"})
DROPPED_CPU_OP_ARGS = frozenset({"External id"})  # links CPU ops to GPU kernels: none in CPU-only traces
DROPPED_CATS = frozenset({"fwdbwd"})
TRIM_NOTE = (f"traces trimmed after recording: args {sorted(DROPPED_ARGS)}, {sorted(DROPPED_CPU_OP_ARGS)} of "
             f"cpu_op events and events of categories {sorted(DROPPED_CATS)} dropped (no analyzer reads them; "
             "findings checked unchanged), compact JSON, gzip -9")


Pin = Mapping[int, tuple[int, ...]]  # rank -> core indexes


@dataclass(frozen=True)
class Model:
    width: int = 256
    depth: int = 1
    batch: int = 2048


REPRO_MODEL = Model(width=512, depth=3, batch=128)  # the bundled sample's job (2 buckets per step)


@dataclass(frozen=True)
class RunSpec:
    """One planned run: what it is (scenario, layout, truth) and how to run it again."""

    name: str
    scenario: str
    layout: str
    profiled_steps: int
    model: Model = Model()
    slowed_rank: int | None = None
    slow_factor: float = 1.0  # inproc only
    pin: Pin = field(default_factory=dict)  # rank -> core indexes
    load: tuple[BackgroundLoad, ...] = ()
    hog_competitors: int = 0  # hog only
    quota_share: float = 0.0  # quota only
    stopped_share: float = 0.0  # stop only
    not_expected_why: str = ""  # slowed runs: why the slowed rank is not expected to be named ("": it is)

    @property
    def expect_named(self) -> bool | None:
        """Whether the slowed rank should be named (None for a clean run: there is none)."""
        if self.slowed_rank is None:
            return None
        return not self.not_expected_why

    def truth(self) -> dict[str, Any]:
        """The runs.json fields that come from the plan's word on this run, not from recording it."""
        return {"expect_named": self.expect_named, "expect_named_why": self.not_expected_why or None}

    @property
    def steps(self) -> int:
        return max(MIN_STEPS, self.profiled_steps + 2 + LEAD_IN_STEPS)


_2X2: Pin = {0: (0,), 1: (0,), 2: (1,), 3: (1,)}
_2X2_ALT: Pin = {0: (0,), 2: (0,), 1: (1,), 3: (1,)}
_PAIR_12: Pin = {1: (0,), 2: (0,)}
_PAIR_03: Pin = {0: (1,), 3: (1,)}
_3_1: Pin = {0: (0,), 1: (0,), 2: (0,), 3: (1,)}
_1_3: Pin = {0: (0,), 1: (1,), 2: (1,), 3: (1,)}

NOT_BINDING_HALF_CORE = ("not expected to be named: 0.5 of a core does not bind when each rank already gets "
                         "about half a core (4 ranks on 2 shared cores)")
# Strong enough to bind while the other work on this machine runs too (load 6-12 on 2 cores: a rank then
# gets ~0.17-0.5 of a core): 0.15 of a core and 8 busy loops were tried first and slowed the rank only
# 1.47-2.95x and 0.88-1.98x forward (foreign work the balancer moves onto the other ranks' core slows
# them as much); 0.05 of a core and 16 loops are >= ~3x below what the other ranks get even then.
BINDING_QUOTA_SHARE = 0.05  # of one core
# stop runs: 90% of every 20 ms, in slices much shorter than a step (80% let the rank run longer under load)
STOP_SHARE = 0.9
STOP_PERIOD_S = 0.02
STRONG_HOG_COMPETITORS = 16  # the rank gets 1/17 of its core, the others 1/3 (less under outside load)

PLAN: tuple[RunSpec, ...] = (
    # clean: the repro (6 profiled steps, unpinned)
    RunSpec("clean-repro-a", "clean", "unpinned", 6, REPRO_MODEL),
    RunSpec("clean-repro-b", "clean", "unpinned", 6, REPRO_MODEL),
    RunSpec("clean-repro-c", "clean", "unpinned", 6, REPRO_MODEL),
    RunSpec("clean-repro-d", "clean", "unpinned", 6, REPRO_MODEL),
    # clean: unpinned
    RunSpec("clean-unpinned-16", "clean", "unpinned", 16),
    RunSpec("clean-unpinned-24", "clean", "unpinned", 24),
    RunSpec("clean-unpinned-32", "clean", "unpinned", 32),
    RunSpec("clean-unpinned-6", "clean", "unpinned", 6),
    # clean: pinned layouts
    RunSpec("clean-2x2-16", "clean", "pinned-2x2", 16, pin=_2X2),
    RunSpec("clean-2x2-6", "clean", "pinned-2x2", 6, pin=_2X2),
    RunSpec("clean-2x2alt-16", "clean", "pinned-2x2-alt", 16, pin=_2X2_ALT),
    RunSpec("clean-pair12-16", "clean", "pair-pinned(1,2)", 16, pin=_PAIR_12),
    RunSpec("clean-pair12-24", "clean", "pair-pinned(1,2)", 24, pin=_PAIR_12),
    RunSpec("clean-pair03-16", "clean", "pair-pinned(0,3)", 16, pin=_PAIR_03),
    RunSpec("clean-3+1-16", "clean", "pinned-3+1", 16, pin=_3_1),
    RunSpec("clean-1+3-16", "clean", "pinned-1+3", 16, pin=_1_3),
    # clean: background load tied to no rank
    RunSpec("clean-load1-16", "clean", "unpinned+hog", 16, load=(BackgroundLoad(hogs=1),)),
    RunSpec("clean-load1-6", "clean", "unpinned+hog", 6, load=(BackgroundLoad(hogs=1),)),
    RunSpec("clean-load2-16", "clean", "unpinned+2hogs", 16, load=(BackgroundLoad(hogs=2),)),
    RunSpec("clean-bursty-16", "clean", "unpinned+bursty-hogs", 16,
            load=(BackgroundLoad(hogs=2, busy=0.5, period_s=0.3),)),
    RunSpec("clean-2x2-corehog-16", "clean", "pinned-2x2+hog-on-core1", 16, pin=_2X2,
            load=(BackgroundLoad(hogs=1, cores=(1,)),)),
    # slowed: an outside CPU hog on one rank's core, that rank alone with it
    RunSpec("hog-rank1-16", "hog", "hog-core", 16, slowed_rank=1, hog_competitors=4),
    RunSpec("hog-rank3-16", "hog", "hog-core", 16, slowed_rank=3, hog_competitors=4),
    RunSpec("hog-rank0-16", "hog", "hog-core", 16, slowed_rank=0, hog_competitors=4),
    RunSpec("hog16-rank2-16", "hog", "hog-core", 16, slowed_rank=2, hog_competitors=STRONG_HOG_COMPETITORS),
    RunSpec("hog16-rank0-16", "hog", "hog-core", 16, slowed_rank=0, hog_competitors=STRONG_HOG_COMPETITORS),
    RunSpec("hog16-rank3-16", "hog", "hog-core", 16, slowed_rank=3, hog_competitors=STRONG_HOG_COMPETITORS),
    # slowed: extra compute inside the job
    RunSpec("inproc-rank2-x5-16", "inproc", "unpinned", 16, slowed_rank=2, slow_factor=5),
    RunSpec("inproc-rank0-x3-16", "inproc", "unpinned", 16, slowed_rank=0, slow_factor=3),
    RunSpec("inproc-rank3-x7-16", "inproc", "unpinned", 16, slowed_rank=3, slow_factor=7),
    RunSpec("inproc-rank2-x5-repro", "inproc", "unpinned", 6, REPRO_MODEL, slowed_rank=2, slow_factor=5),
    # slowed: a cgroup CPU quota on one rank (0.5 of a core does not bind here: kept, not expected to be named)
    RunSpec("quota-rank1-16", "quota", "unpinned", 16, slowed_rank=1, quota_share=0.5,
            not_expected_why=NOT_BINDING_HALF_CORE),
    RunSpec("quota-rank2-16", "quota", "unpinned", 16, slowed_rank=2, quota_share=0.5,
            not_expected_why=NOT_BINDING_HALF_CORE),
    RunSpec("quota-rank3-16", "quota", "unpinned", 16, slowed_rank=3, quota_share=0.5,
            not_expected_why=NOT_BINDING_HALF_CORE),
    RunSpec("quota05-rank0-16", "quota", "unpinned", 16, slowed_rank=0, quota_share=BINDING_QUOTA_SHARE),
    RunSpec("quota05-rank2-16", "quota", "unpinned", 16, slowed_rank=2, quota_share=BINDING_QUOTA_SHARE),
    RunSpec("quota05-rank3-16", "quota", "unpinned", 16, slowed_rank=3, quota_share=BINDING_QUOTA_SHARE),
    # slowed: the rank's process stopped (SIGSTOP) most of every 20 ms from outside
    RunSpec("stop90-rank1-16", "stop", "unpinned", 16, slowed_rank=1, stopped_share=STOP_SHARE),
    RunSpec("stop90-rank3-16", "stop", "unpinned", 16, slowed_rank=3, stopped_share=STOP_SHARE),
    RunSpec("stop90-rank0-16", "stop", "unpinned", 16, slowed_rank=0, stopped_share=STOP_SHARE),
)


class StackProfiles:
    """py-spy ``record`` of every rank after the lead-in steps, written as ``profiles/rank-<r>.txt``
    with its sidecar (the format ``perftracker attach`` writes), for the ``stack_profile`` analyzer.

    Starts once every rank has written `after_steps` step lines, records until the worker exits (or
    the job ends: SIGINT makes py-spy write what it has)."""

    def __init__(self, run_dir: Path, after_steps: int, rate_hz: int = PYSPY_RATE_HZ) -> None:
        self.run_dir, self.after_steps, self.rate_hz = run_dir, after_steps, rate_hz

    def describe(self) -> dict[str, Any]:
        return {"how": "py-spy-record (observer, slows nothing)", "rate_hz": self.rate_hz,
                "after_steps": self.after_steps}

    def _steps_written(self, rank: int) -> int:
        path = self.run_dir / "steps" / f"rank-{rank}.jsonl"
        try:
            return path.read_bytes().count(b"\n")
        except OSError:
            return 0

    def __call__(self, pids: dict[int, int], stop: threading.Event) -> None:
        pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        while not stop.is_set() and min(self._steps_written(r) for r in pids) < self.after_steps:
            stop.wait(0.05)
        if stop.is_set():
            return
        folder = self.run_dir / "profiles"
        folder.mkdir(parents=True, exist_ok=True)
        started: dict[int, tuple[subprocess.Popen[bytes], int]] = {}
        for rank, pid in sorted(pids.items()):
            cmd = [pyspy, "record", "--pid", str(pid), "--rate", str(self.rate_hz), "--duration", "600",
                   "--nonblocking", "--idle", "--threads", "--format", "raw",
                   "--output", str(folder / f"rank-{rank}.txt")]
            started[rank] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                             time.time_ns())
        while not stop.is_set() and any(proc.poll() is None for proc, _ in started.values()):
            stop.wait(0.1)
        for proc, _ in started.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for rank, (proc, started_ns) in started.items():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            meta = {"rank": rank, "pid": pids[rank], "host": socket.gethostname(), "rate_hz": self.rate_hz,
                    "duration_s": (time.time_ns() - started_ns) / 1e9, "started_ns": started_ns}
            (folder / f"rank-{rank}.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")


def disturbance_for(spec: RunSpec, run_dir: Path) -> Together:
    """Everything that acts on the workers from outside in run `spec` (always the stack recorder)."""
    parts: list[Any] = []
    if spec.pin:
        parts.append(Pinning(spec.pin))
    parts.extend(spec.load)
    if spec.scenario == "hog":
        assert spec.slowed_rank is not None
        parts.append(CoreContention(spec.slowed_rank, competitors=spec.hog_competitors))
    elif spec.scenario == "quota":
        assert spec.slowed_rank is not None
        if not CpuQuota.available():
            raise SystemExit("quota runs need a writable cgroup-v1 cpu controller at /sys/fs/cgroup/cpu (root)")
        parts.append(CpuQuota(spec.slowed_rank, share=spec.quota_share))
    elif spec.scenario == "stop":
        assert spec.slowed_rank is not None
        parts.append(DutyCycle(spec.slowed_rank, stopped=spec.stopped_share, period_s=STOP_PERIOD_S))
    parts.append(StackProfiles(run_dir, after_steps=LEAD_IN_STEPS))
    return Together(*parts)


def slowed_how(spec: RunSpec) -> dict[str, Any] | None:
    if spec.scenario == "clean":
        return None
    if spec.scenario == "inproc":
        return {"kind": "extra-compute-in-job", "slow_factor": spec.slow_factor,
                "detail": f"{round(spec.slow_factor) - 1} extra no-grad forward passes per step (forward x{spec.slow_factor:g})"}
    if spec.scenario == "hog":
        return {"kind": "cpu-hog-on-its-core", "competitors": spec.hog_competitors,
                "detail": f"rank pinned alone to the last core with {spec.hog_competitors} busy loops; "
                          "the other ranks pinned to the other core"}
    if spec.scenario == "stop":
        return {"kind": "sigstop-duty-cycle", "stopped": spec.stopped_share,
                "detail": f"process SIGSTOPped {spec.stopped_share:.0%} of every {STOP_PERIOD_S * 1000:g} ms from "
                          "outside (SIGCONT between)"}
    return {"kind": "cgroup-cpu-quota", "share": spec.quota_share,
            "detail": f"cgroup-v1 CFS quota of {spec.quota_share:g} of one core on every thread of the rank"}


def trim_trace(path: Path, dropped_args: frozenset[str] = DROPPED_ARGS) -> tuple[int, int]:
    """Rewrite the gzip'd trace at `path` without `dropped_args`, `DROPPED_CPU_OP_ARGS` (of cpu_op events)
    and `DROPPED_CATS`; (bytes before, after). Trimming a trimmed trace changes nothing."""
    before = path.stat().st_size
    with gzip.open(path, "rt", encoding="utf-8") as src:
        doc = json.load(src)
    kept = []
    for event in doc.get("traceEvents", []):
        if event.get("cat") in DROPPED_CATS:
            continue
        args = event.get("args")
        if isinstance(args, dict):
            dropped = dropped_args | DROPPED_CPU_OP_ARGS if event.get("cat") == "cpu_op" else dropped_args
            for key in dropped & args.keys():
                del args[key]
            if not args:
                del event["args"]
        kept.append(event)
    doc["traceEvents"] = kept
    packed = path.with_name(f".{path.name}.tmp")
    with gzip.open(packed, "wt", encoding="utf-8", compresslevel=9) as dst:
        json.dump(doc, dst, separators=(",", ":"))
    os.replace(packed, path)
    return before, path.stat().st_size


def observed(run_dir: Path, profiled_steps: int) -> dict[str, Any]:
    """What the step files show over the profiled steps: per-rank median forward and step time (ms),
    and each rank's forward over the median of the others' (the slowdown as the job saw it)."""
    forward: dict[int, float] = {}
    step: dict[int, float] = {}
    for path in sorted((run_dir / "steps").glob("rank-*.jsonl")):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()][-profiled_steps:]
        rank = int(records[0]["rank"])
        forward[rank] = statistics.median(r["phases_ns"]["forward"] / 1e6 for r in records)
        step[rank] = statistics.median((r["end_ns"] - r["start_ns"]) / 1e6 for r in records)
    ratio = {r: forward[r] / statistics.median([v for k, v in forward.items() if k != r]) for r in forward}
    return {"median_forward_ms": {str(r): round(v, 1) for r, v in sorted(forward.items())},
            "median_step_ms": {str(r): round(v, 1) for r, v in sorted(step.items())},
            "forward_vs_others": {str(r): round(v, 2) for r, v in sorted(ratio.items())}}


def load_index(corpus: Path) -> dict[str, Any]:
    path = corpus / RUNS_JSON
    if path.is_file():
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    return {"runs": []}


def save_index(corpus: Path, index: dict[str, Any]) -> None:
    """Write `index` to `corpus/runs.json`, runs in plan order, each planned run's truth fields from the plan."""
    order = {spec.name: i for i, spec in enumerate(PLAN)}
    by_name = {spec.name: spec for spec in PLAN}
    index["runs"] = [_with_truth(entry, by_name[entry["name"]]) if entry["name"] in by_name else entry
                     for entry in index["runs"]]
    index["runs"].sort(key=lambda r: (order.get(r["name"], len(order)), r["name"]))
    index["about"] = {
        "what": "real 4-rank torchrun DDP jobs (gloo, CPU) recorded for the straggler-accuracy measurement "
                "(scripts/measure_accuracy.py); regenerate with scripts/record_accuracy_runs.py --only NAME",
        "truth": "scenario 'clean': no single rank slowed (slowed_rank null); other scenarios: slowed_rank "
                 "was slowed as slowed_how says; expect_named (null for clean runs): whether that slowdown is "
                 "real enough here that the slowed rank should be named (false: expect_named_why says why; "
                 "measured and shown apart, not counted in the detection rate)",
        "machine": f"{os.cpu_count()} cores shared with other work (other test runs) while recording: real "
                   "background noise on every run, on top of the run's own layout/load",
        "trace_trim": TRIM_NOTE,
        "profiles": "profiles/rank-N.txt: py-spy record --idle --threads --format raw of every rank from "
                    f"step {LEAD_IN_STEPS} to the job's end, {PYSPY_RATE_HZ} Hz",
    }
    tmp = corpus / f".{RUNS_JSON}.tmp"
    tmp.write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, corpus / RUNS_JSON)


def _with_truth(entry: dict[str, Any], spec: RunSpec) -> dict[str, Any]:
    """`entry` with the plan's truth fields of `spec`, placed after ``slowed_how``."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key in ("expect_named", "expect_named_why"):
            continue
        out[key] = value
        if key == "slowed_how":
            out |= spec.truth()
    return out if "slowed_how" in entry else out | spec.truth()


def record(spec: RunSpec, corpus: Path) -> dict[str, Any]:
    """Run `spec` into `corpus/<name>` (replacing it) and return its runs.json entry."""
    run_dir = corpus / spec.name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shown = os.path.relpath(run_dir, REPO)
    t0 = time.monotonic()
    run_job(run_dir, nproc=NPROC, steps=spec.steps, profile_steps=spec.profiled_steps,
            slow_rank=spec.slowed_rank if spec.scenario == "inproc" and spec.slowed_rank is not None else -1,
            slow_factor=spec.slow_factor, width=spec.model.width, depth=spec.model.depth,
            batch=spec.model.batch, timeout=TIMEOUT_S, job_name=f"accuracy-{spec.name}",
            shown_run_dir=shown, disturb=disturbance_for(spec, run_dir),
            manifest_extra={"accuracy": {"scenario": spec.scenario, "layout": spec.layout,
                                         "slowed_rank": spec.slowed_rank}})
    wall = time.monotonic() - t0
    sizes = [trim_trace(p) for p in sorted((run_dir / "traces").glob("*.json.gz"))]
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return {
        "name": spec.name,
        "scenario": spec.scenario,
        "layout": spec.layout,
        "ranks": NPROC,
        "steps": spec.steps,
        "profiled_steps": spec.profiled_steps,
        "slowed_rank": spec.slowed_rank,
        "slowed_how": slowed_how(spec),
        **spec.truth(),
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
        "params": {"model": asdict(spec.model), "pin": {str(r): list(c) for r, c in sorted(spec.pin.items())},
                   "load": [load.describe() for load in spec.load], "slow_factor": spec.slow_factor,
                   "hog_competitors": spec.hog_competitors, "quota_share": spec.quota_share,
                   "stopped_share": spec.stopped_share},
        "regenerate": f"python scripts/record_accuracy_runs.py --only {spec.name} --replace",
        "command": manifest["command"],
        "disturbance": manifest.get("disturbance"),
        "job_wall_s": round(wall, 1),
        "trace_bytes": sum(after for _, after in sizes),
        "trace_bytes_untrimmed": sum(before for before, _ in sizes),
        "observed": observed(run_dir, spec.profiled_steps),
        "load_during_recording": [round(x, 2) for x in os.getloadavg()],
    }


def retrim(corpus: Path, index: dict[str, Any], names: set[str]) -> int:
    """Trim the traces of the recorded runs in `names` again and update their sizes in runs.json."""
    for entry in index["runs"]:
        if entry["name"] in names:
            entry["trace_bytes"] = sum(trim_trace(p)[1] for p in sorted((corpus / entry["name"] / "traces").glob("*.json.gz")))
    save_index(corpus, index)
    print(f"trimmed the traces of {len(names & {e['name'] for e in index['runs']})} run(s) again")
    return 0


def select(plan: Sequence[RunSpec], only: str | None, scenarios: str | None, count: int | None) -> list[RunSpec]:
    """The planned runs named in `only` (comma-separated), else those of `scenarios`, at most `count`
    per scenario."""
    if only:
        names = [n.strip() for n in only.split(",") if n.strip()]
        by_name = {spec.name: spec for spec in plan}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise SystemExit(f"unknown run names {unknown}; planned: {', '.join(by_name)}")
        return [by_name[n] for n in names]
    wanted = [s.strip() for s in (scenarios or ",".join(SCENARIOS)).split(",") if s.strip()]
    bad = [s for s in wanted if s not in SCENARIOS]
    if bad:
        raise SystemExit(f"unknown scenarios {bad}; choose from {', '.join(SCENARIOS)}")
    chosen: list[RunSpec] = []
    for scenario in wanted:
        runs = [spec for spec in plan if spec.scenario == scenario]
        chosen += runs[:count] if count is not None else runs
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated run names from the plan (see --list)")
    parser.add_argument("--scenarios", help=f"comma-separated, from {','.join(SCENARIOS)} (default: all)")
    parser.add_argument("--count", type=int, help="at most this many runs per scenario")
    parser.add_argument("--out", type=Path, default=CORPUS, help="corpus folder (default: %(default)s)")
    parser.add_argument("--replace", action="store_true", help="re-record runs that are already recorded")
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    parser.add_argument("--reindex", action="store_true",
                        help="rewrite runs.json's truth fields (expect_named) from the plan instead of recording")
    parser.add_argument("--retrim", action="store_true",
                        help="trim the recorded runs' traces again (after DROPPED_* changed) instead of recording")
    args = parser.parse_args(argv)
    chosen = select(PLAN, args.only, args.scenarios, args.count)
    if args.list:
        for spec in chosen:
            print(f"{spec.name:28} {spec.scenario:7} {spec.layout:26} profiled {spec.profiled_steps:2} "
                  f"slowed {spec.slowed_rank}")
        return 0
    corpus: Path = args.out.resolve()
    corpus.mkdir(parents=True, exist_ok=True)
    index = load_index(corpus)
    if args.retrim:
        return retrim(corpus, index, {spec.name for spec in chosen})
    if args.reindex:
        save_index(corpus, index)
        print(f"rewrote the truth fields of {len(index['runs'])} run(s) in {corpus / RUNS_JSON} from the plan")
        return 0
    t_all = time.monotonic()
    for i, spec in enumerate(chosen, 1):
        if not args.replace and (corpus / spec.name / "manifest.json").is_file() and any(
                r["name"] == spec.name for r in index["runs"]):
            print(f"[{i}/{len(chosen)}] {spec.name}: already recorded (--replace to re-record)")
            continue
        entry = record(spec, corpus)
        index["runs"] = [r for r in index["runs"] if r["name"] != spec.name] + [entry]
        save_index(corpus, index)
        print(f"[{i}/{len(chosen)}] {spec.name}: {entry['job_wall_s']} s, traces {entry['trace_bytes'] // 1024} KiB, "
              f"forward vs others {entry['observed']['forward_vs_others']}", flush=True)
    print(f"recorded {len(chosen)} run(s) in {time.monotonic() - t_all:.0f} s into {corpus}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
