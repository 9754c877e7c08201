"""The bundled samples tell true stories, and a run whose manifest names synthetic inputs says so everywhere
(findings.json's summary, an `inputs` finding, the report's banner, the terminal)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from api_helpers import analyzed

from perftracker.collectors.loading import LoadOptions, load_path, synthetic_inputs
from perftracker.outputs import render_report
from perftracker.store import SyntheticInput

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
REAL = "ddp-gloo-4rank-slow-rank2"
GPU = "synthetic-gpu-4rank-thermal"
SYNTHETIC_SAMPLES = {GPU, "nccl-roce-2node-misconfig"}  # the project-written ones; the others were collected
ALL_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_manifest_entry_reads_in_its_three_shapes() -> None:
    # GIVEN manifests naming synthetic inputs as a list, as one object, as "all", and none at all
    entry = {"path": "counters/vm.gpu.jsonl", "made_by": "scripts/x.py", "what": "NVML samples"}
    # WHEN each is read
    listed, _ = synthetic_inputs({"synthetic": [entry]})
    single, _ = synthetic_inputs({"synthetic": {"path": ".", "what": "a demo"}, "created_by": "scripts/y.py"})
    every, _ = synthetic_inputs({"synthetic": "all", "generated_by": "scripts/z.py"})
    none, notes = synthetic_inputs({"job": "real"})
    # THEN each names its inputs, the author defaulting to the manifest's, and a real run names none
    assert listed == [SyntheticInput("counters/vm.gpu.jsonl", "scripts/x.py", "NVML samples")]
    assert single == [SyntheticInput(".", "scripts/y.py", "a demo")]
    assert every[0].path == "." and every[0].made_by == "scripts/z.py"
    assert none == [] and notes == []


def test_an_unreadable_entry_is_a_note_and_the_others_are_kept() -> None:
    # GIVEN a list with one good entry, one without a path and one that is not an object
    found, notes = synthetic_inputs({"synthetic": [{"path": "env/"}, {"what": "?"}, 7]})
    # THEN the good one is kept and each bad one is a warning naming the manifest and what to write
    assert [s.path for s in found] == ["env/"]
    assert [n.level for n in notes] == ["warning", "warning"] and all(n.source == "manifest.json" for n in notes)
    assert "'path'" in notes[0].message


def test_the_loader_puts_the_entry_in_the_run_info() -> None:
    # GIVEN the synthetic GPU sample and the real DDP sample WHEN loaded
    gpu = load_path(SAMPLES / GPU, LoadOptions(cache_dir=None, workers=1)).run_info
    real = load_path(SAMPLES / REAL, LoadOptions(cache_dir=None, workers=1)).run_info
    # THEN the synthetic one's inputs are typed in the RunInfo, the real one has none
    assert [s.path for s in gpu.synthetic_inputs] == [".", "traces/", "counters/gpu-node-1.gpu.jsonl",
                                                      "counters/gpu-node-1.rdma.jsonl"]
    assert all(s.made_by and s.what for s in gpu.synthetic_inputs)
    assert real.synthetic_inputs == []


@pytest.mark.parametrize("sample", ALL_SAMPLES)
def test_synthetic_inputs_are_said_in_summary_finding_and_report(tmp_path: Path, sample: str) -> None:
    # GIVEN a bundled sample WHEN analyzed
    result = analyzed(SAMPLES / sample, tmp_path / "out", cache=False, workers=1)
    summary = result.document["summary"]
    said = [f for f in result.findings if f.analyzer == "inputs" and f.evidence.get("synthetic_inputs")]
    html = result.report_path.read_text(encoding="utf-8")
    if sample in SYNTHETIC_SAMPLES:
        # THEN a synthetic one lists its made-up inputs in the summary, as one info finding, and in a
        # banner under the report's header (before the verdict), also when the report is redrawn
        made_up = summary["synthetic_inputs"]
        assert made_up and all(set(s) == {"path", "made_by", "what"} for s in made_up)
        assert len(said) == 1 and said[0].severity.label == "info"
        assert said[0].title.startswith("Every input is synthetic: ")  # both say "." (every input) first
        assert all(s["path"] in said[0].title for s in made_up)
        assert 'id="synthetic"' in html and html.index('id="synthetic"') < html.index('id="verdict"')
        assert all(s["path"] in html for s in made_up)
        result.report_path.unlink()
        render_report(result.out_dir)
        assert 'id="synthetic"' in result.report_path.read_text(encoding="utf-8")
    else:
        # THEN a real one has no such key, finding or banner
        assert "synthetic_inputs" not in summary and said == [] and 'id="synthetic"' not in html


def test_the_terminal_says_which_inputs_are_synthetic(tmp_path: Path) -> None:
    # GIVEN the synthetic GPU sample and the real DDP sample
    def terminal(sample: str) -> str:
        res = subprocess.run([sys.executable, "-m", "perftracker", "analyze", str(SAMPLES / sample), "-o",
                              str(tmp_path / sample), "--no-cache"], capture_output=True, text=True, timeout=300,
                             env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        assert res.returncode == 0, res.stderr
        return " ".join(res.stdout.split())
    # WHEN each is analyzed from the command line
    gpu, real = terminal(GPU), terminal(REAL)
    # THEN the synthetic one's verdict is followed by the synthetic inputs, the real one's is not
    assert "Synthetic inputs (made up, not collected): every input: a sample written" in gpu
    assert "traces/: Kineto traces" in gpu
    assert gpu.index("Verdict:") < gpu.index("Synthetic inputs") < gpu.index("severity")
    assert "Synthetic" not in real


def test_the_gpu_sample_names_the_straggler_and_its_throttle_overlaps_the_traced_steps(tmp_path: Path) -> None:
    # GIVEN the synthetic GPU sample: rank 2 given extra GPU kernel time, GPU 2 thermally throttled
    # WHEN analyzed
    result = analyzed(SAMPLES / GPU, tmp_path / "out", cache=False, workers=1)
    # THEN rank 2 is named from the traces alone as a compute straggler, its extra time in GPU kernels
    named = [f for f in result.findings if f.analyzer == "straggler" and f.severity.label != "info"]
    assert [f.ranks for f in named] == [(2,)] and named[0].evidence["kind"] == "compute"
    slower = named[0].evidence["slower_ops"][0]
    assert slower["ms_per_step"] > 1.2 * slower["peers_ms_per_step"]
    # AND exactly one GPU is throttled: GPU 2 on its host, rank 2's, thermally
    throttled = [f for f in result.findings if f.analyzer == "gpu_health" and f.severity.label != "info"]
    assert len(throttled) == 1
    ev = throttled[0].evidence
    assert (ev["host"], ev["gpu"], ev["reason"], ev["ranks"]) == ("gpu-node-1", 2, "thermal", [2])
    # AND a throttle period overlaps the traced steps on the epoch clock (trace base + event start)
    store = result.store
    base = store["ranks"].set_index("rank")["base_ns"]
    events = store.events
    epoch = events["start_ns"] + events["rank"].map(base)
    first, last = int(epoch.min()), int((epoch + events["dur_ns"]).max())
    assert any(start <= last and end >= first for start, end in ev["periods"])
    # AND the RDMA ports are healthy
    assert not [f for f in result.findings if f.analyzer in ("rdma", "rdma_pfc") and f.severity.label != "info"]


def test_the_gpu_sample_is_what_its_script_writes(tmp_path: Path) -> None:
    # GIVEN the script that made the synthetic GPU sample
    make = _script("make_sample_synthetic_gpu")
    # WHEN it writes the sample again into a fresh folder
    assert make.main([str(tmp_path / GPU)]) == 0
    # THEN every file is byte for byte the committed one (deterministic, and nothing edited by hand)
    committed = {p.relative_to(SAMPLES / GPU): p.read_bytes() for p in (SAMPLES / GPU).rglob("*") if p.is_file()}
    again = {p.relative_to(tmp_path / GPU): p.read_bytes() for p in (tmp_path / GPU).rglob("*") if p.is_file()}
    assert sorted(again) == sorted(committed)
    assert [name for name in committed if committed[name] != again[name]] == []
    assert sum(len(b) for b in committed.values()) < 1_000_000


def test_the_real_sample_has_no_made_up_host_counters(tmp_path: Path) -> None:
    # GIVEN the real CPU-only DDP run (no GPU, no RDMA NIC on the machine that ran it)
    run = SAMPLES / REAL
    assert not (run / "counters").exists() and "synthetic" not in json.loads((run / "manifest.json").read_text())
    # WHEN analyzed
    result = analyzed(run, tmp_path / "out", cache=False, workers=1)
    # THEN rank 2 is named from its forward phase, and no GPU or NIC finding claims to explain it
    actionable = [f for f in result.findings if f.severity.label != "info"]
    assert actionable and all(f.ranks == (2,) for f in actionable)
    forward = [f for f in actionable if f.analyzer == "steps"]
    assert forward and forward[0].evidence.get("phase") == "forward"
    assert not [f for f in result.findings if f.analyzer in ("gpu_health", "gpu_links", "rdma", "rdma_pfc")]
