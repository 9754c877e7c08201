"""Thresholds as data: declared once (perftracker/data/thresholds.toml), read by name, changed per run.

Promises checked: every declared threshold is read by some rule and every name a rule reads is declared; no
analyzer keeps a module-level number outside the table unless it is listed below as not deciding a finding;
changing a threshold changes the findings it decides on a real sample (and only in the run that changed it);
`--set` / `--thresholds` reach the analysis and findings.json records what changed; a wrong name or value is
a usage error (exit 2) naming the closest name; the reference page is the one the script writes; the online
rules (the watcher) read the same table.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.findings import rank_findings
from perftracker.analyzers.online.step_rules import step_stall
from perftracker.analyzers.passes import costed_findings
from perftracker.analyzers.thresholds import DECLARED, Thresholds, active, threshold
from perftracker.cli.thresholds import reference_markdown
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.errors import UsageError
from perftracker.store import Store

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "perftracker"
SAMPLE = ROOT / "sample_traces" / "ddp-gloo-4rank-slow-rank2"
READ = re.compile(r"""\b(?:threshold|threshold_int|default)\(\s*["']([a-z_.]+)["']\s*\)""")

# Module-level numbers of analyzers/ that decide no finding: how much is shown, chunk sizes, search grids,
# encodings. A new number that decides a finding belongs in perftracker/data/thresholds.toml instead.
NOT_THRESHOLDS = {
    "layout/views.py": {"MAX_LISTED"},  # ranks listed in a finding's evidence
    "pipeline/analyzer.py": {"BACKWARD_PER_FORWARD"},  # the cost model of a backward pass, not a judgement
    "pipeline/views.py": {"MIN_WAIT_MS"},  # which victims the evidence lists
    # matching members, not judging them; inferring a gloo op's group
    "stragglers/group_of.py": {"_MAX_SHIFT", "_MIN_AGREE", "_TOLERANCE", "_IMPOSSIBLE_SHARE", "_SLACK_NS"},
    "stepgraph/replay.py": {"FIX_RANKS_MAX"},  # rows of the whatif_ranks view
    # the replay's own consistency check; replays per worker; the paper's M_W
    "whatif/analyzer.py": {"REPLAY_TOL", "MAX_EXACT_WORKERS", "TOP_WORKERS_PCT"},
    "whatif/ops_graph.py": {"NEG_TRANSFER_NS"},  # clock tolerance of the records
    # timeline size, marks; the report's timeline chart size
    "traces/merged_timeline.py": {"DEFAULT_MAX_RANKS", "DEFAULT_MAX_EVENTS", "LATE_MARK_MS", "MAX_TIMELINE_RANKS",
                                  "MAX_BOXES_PER_LANE", "FOCUS_SLOWEST", "FOCUS_PEERS"},
    "traces/kernels.py": {"TOP_ALL", "TOP_PER_RANK", "TOP_SELF"},  # table rows shown
    "traces/gap_ops.py": {"TOP_OPS", "LONGEST", "OPS_PER_GAP"},  # table rows shown
    "traces/per_rank.py": {"CHUNK_ROWS"},  # memory per chunk
    "stragglers/stack_profile.py": {"MAX_FRAMES", "MAX_RANKS", "MIN_SHARE", "MIN_SPREAD"},  # rows of a report table
    "ranks/focus.py": {"TOP_K", "MAX_PEERS"},  # ranks shown
    "ranks/groups.py": {"MANY_RANKS", "MAX_GROUPS"},  # when charts bin ranks
    "online/step_period.py": {"MAX_DEPTH", "MAX_DEPTHS_TRIED", "COARSE_STEPS_PER_PEAK", "FINE_STEPS"},  # search grid
    "online/step_rules.py": {"DEFAULT_WINDOW", "DEFAULT_RISE"},  # the watch's --watch-window / --watch-rise
    "online/burst_rule.py": {"DEFAULT_WINDOW"},  # the watch's burst window (WatchOptions.burst_window)
    "online/diagnosis.py": {"SUSPICION_CHARS"},  # text length
    "online/waited_rank.py": {"TOP_FRAMES"},  # how many of the named rank's frames are shown
    "compare/diff.py": {"DEFAULT_TOLERANCE", "TOP_OPS"},  # diff --tolerance; rows shown
    "health/gpu_health.py": {"MAX_PERIODS", "MAX_BINS"},  # periods listed; time windows of the peer test
    "health/tables.py": {"MAX_HOSTS", "MAX_PERIODS"},  # chart size
    "health/link_stalls.py": {"EPOCH_NS"},  # tells wall-clock from monotonic ns
    "health/rdma.py": {"ACTIVE"},  # sysfs port state code
    "nccl/tables.py": {"MAX_VARIABLES", "MAX_WARNS"},  # rows shown
    "efficiency/models.py": {"BWD_FACTOR"},  # the FLOPs model: backward = 2.5x forward (recompute included)
    "efficiency/devices.py": {"MAX_FIGURE"},  # a device file's figure beyond this is a typo (input check)
    "efficiency/shapes.py": {"MAX_DIM"},  # a recorded dimension beyond this is damage (input check)
    "failures/roots.py": {"_SHOWN"},  # ranks named in a title
    "failures/waitfor.py": {"MAX_LAST", "HUB_FLOOR"},  # last acts written; hub node ids
    "failures/waitview.py": {"MAX_ROWS", "_LISTED"},  # rows of the report table, ranks listed
    "findings.py": {"MAX_EVIDENCE_DEPTH"},  # nesting kept from an edited findings.json (input bound)
    "sanity/judge.py": {"MAX_PAIRS_SHOWN"},  # pairs kept in the evidence
    "sanity/robust.py": {"MAD_TO_SIGMA", "LEAVE_ONE_OUT_UP_TO"},  # a constant; how the median is computed
    "stragglers/late_rank.py": {"MAX_INTERVALS"},  # intervals described
}


def _module_numbers(path: Path) -> set[str]:
    """Names a module binds at top level to a number (or arithmetic of numbers)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            parts = list(ast.walk(node.value))
            numbers = [p for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, int | float)
                       and not isinstance(p.value, bool)]
            if numbers and all(isinstance(p, ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop)
                               for p in parts):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_every_declared_threshold_is_read_and_every_name_read_is_declared() -> None:
    # GIVEN the package's source
    read = {m for path in PACKAGE.rglob("*.py") for m in READ.findall(path.read_text(encoding="utf-8"))}
    # THEN each name read is declared, and each declared one is read by some rule
    assert read - set(DECLARED) == set()
    assert set(DECLARED) - read == set()
    assert len(DECLARED) >= 120


def test_no_analyzer_keeps_a_deciding_number_outside_the_table() -> None:
    # GIVEN every analyzer module; WHEN its top-level numbers are listed
    found = {}
    for path in sorted((PACKAGE / "analyzers").rglob("*.py")):
        rel = path.relative_to(PACKAGE / "analyzers").as_posix()
        extra = _module_numbers(path) - NOT_THRESHOLDS.get(rel, set())
        if extra and rel != "thresholds.py":
            found[rel] = sorted(extra)
    # THEN none is left but those that decide no finding
    assert found == {}


@pytest.fixture(scope="module")
def sample() -> Store:
    return load_path(SAMPLE, LoadOptions(cache_dir=None))


def _keys(store: Store, **overrides: object) -> dict[str, str]:
    findings = rank_findings(costed_findings(Analysis(store, AnalysisOptions(thresholds=overrides))))
    return {f.key: f.severity.label for f in findings}


def test_changing_a_threshold_changes_the_findings_it_decides(sample: Store) -> None:
    # GIVEN the real 4-rank gloo sample whose rank 2 is slow in its forward phase (5.4x its peers)
    default = _keys(sample)
    assert default["steps:phase:forward:2"] == "warning" and default["straggler:2"] in ("warning", "critical")
    # WHEN the phase imbalance asked for is raised above 5.4x, THEN the phase finding goes, the rest stays
    raised = _keys(sample, **{"steps.phase_imbalance": 5})
    assert "steps:phase:forward:2" not in raised
    assert {k: v for k, v in default.items() if k != "steps:phase:forward:2"} == raised
    # WHEN the compute excess the compute test names is raised above rank 2's (~125% from its traces), THEN
    # 5 steps of last arrivals leave rank 2 within this run's noise: an info note in place of the straggler
    no_compute = _keys(sample, **{"straggler.compute_min_excess": 3.0})
    assert "straggler:2" not in no_compute and "straggler:noise:2" in no_compute
    # AND WHEN the others' wait that makes a late rank worth saying is raised too, THEN the late-arrival note goes
    assert "straggler:noise:2" not in _keys(sample, **{"straggler.compute_min_excess": 3.0,
                                                       "straggler.min_cost_share": 0.9,
                                                       "straggler.critical_cost_share": 0.95})
    # AND a later analysis with the defaults is not touched by the earlier one's overrides
    assert _keys(sample) == default


def test_the_table_answers_per_run_and_records_what_changed() -> None:
    # GIVEN two tables; WHEN one is active, THEN threshold() answers from it, and from the defaults after
    table = Thresholds.with_overrides({"straggler.alpha": "0.005", "shift.alpha": 0.01})
    with active(table):
        assert threshold("straggler.alpha") == 0.005
    assert threshold("straggler.alpha") == DECLARED["straggler.alpha"].value == 0.01
    # THEN only a value other than its default counts as changed
    assert table.changed() == {"straggler.alpha": {"value": 0.005, "default": 0.01}}
    assert Thresholds.with_overrides({}).changed() == {}


@pytest.mark.parametrize("name, value, says", [
    ("straggler.alfa", "0.005", "Did you mean straggler.alpha"),
    ("bogus.name", "1", "perftracker thresholds"),
    ("straggler.alpha", "2", "in (0, 1)"),
    ("stack_profile.min_samples", "2.5", "whole number"),
    ("straggler.alpha", "many", "out of range"),
])
def test_a_wrong_name_or_value_is_a_usage_error_that_says_what_to_do(name: str, value: str, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        Thresholds.with_overrides({name: value})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perftracker", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_set_and_a_thresholds_file_reach_the_analysis_and_findings_json_records_them(tmp_path: Path) -> None:
    # GIVEN a TOML file raising the phase imbalance and the compute test's floor, and --set raising the late
    # rank's cost share
    overrides = tmp_path / "strict.toml"
    overrides.write_text("[steps]\nphase_imbalance = 5\n[straggler]\ncompute_min_excess = 3\n", encoding="utf-8")
    # WHEN the real sample is analyzed with both
    result = _cli("analyze", str(SAMPLE), "-o", str(tmp_path / "out"), "-q", "--thresholds", str(overrides),
                  "--set", "straggler.min_cost_share=0.9", "--set", "straggler.critical_cost_share=0.95")
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out" / "findings.json").read_text(encoding="utf-8"))
    # THEN the findings they decide are gone and findings.json names each change with its default
    found = document["findings"]
    assert not any(f["analyzer"] == "steps" and f["evidence"].get("phase") == "forward" for f in found)
    assert not any(f["analyzer"] == "straggler" and f["ranks"] == [2] for f in found)
    assert document["thresholds_changed"] == {
        "steps.phase_imbalance": {"value": 5.0, "default": 0.3},
        "straggler.compute_min_excess": {"value": 3.0, "default": 0.05},
        "straggler.critical_cost_share": {"value": 0.95, "default": 0.15},
        "straggler.min_cost_share": {"value": 0.9, "default": 0.05}}
    # AND diff with --set records its change in diff.json (both sides read from the saved analysis)
    compared = _cli("diff", str(tmp_path / "out"), str(tmp_path / "out"), "-o", str(tmp_path / "diff"), "-q",
                    "--set", "diff.alpha=0.001")
    assert compared.returncode == 0, compared.stderr
    diff_document = json.loads((tmp_path / "diff" / "diff.json").read_text(encoding="utf-8"))
    assert diff_document["thresholds_changed"] == {"diff.alpha": {"value": 0.001, "default": 0.01}}


def test_an_unknown_name_exits_2_before_any_work(tmp_path: Path) -> None:
    # WHEN analyze is given a name nobody declared
    result = _cli("analyze", str(SAMPLE), "-o", str(tmp_path / "out"), "--set", "straggler.alfa=0.005")
    # THEN it exits 2 with one line naming the closest name and where to look, and writes nothing
    assert result.returncode == 2
    assert "Did you mean straggler.alpha" in result.stderr and "perftracker thresholds" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_the_thresholds_command_lists_every_threshold_with_the_values_a_run_would_use() -> None:
    result = _cli("thresholds", "--json", "--set", "straggler.alpha=0.005")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert set(listed) == set(DECLARED)
    assert listed["straggler.alpha"]["value"] == 0.005 and listed["straggler.alpha"]["default"] == 0.01
    assert all(entry["decides"] and entry["chosen"] and entry["unit"] for entry in listed.values())


def test_the_reference_page_is_the_one_the_script_writes() -> None:
    # GIVEN docs/reference/thresholds.md; THEN it is current (regenerate: python scripts/gen_thresholds_doc.py)
    page = (ROOT / "docs" / "reference" / "thresholds.md").read_text(encoding="utf-8")
    assert page == reference_markdown()
    assert all(f"`{name}`" in page for name in DECLARED)


def test_the_online_rules_read_the_same_table() -> None:
    # GIVEN a job whose steps take 1 s that has been quiet for 6 s
    quiet_ns, step_ns = 6 * 10**9, 10**9
    # THEN by default it is no stall (the floor is online.hang.min_stall_s = 10 s) ...
    assert step_stall(quiet_ns, step_ns, steps_known=10) == ""
    # ... and with the floor lowered for this run it is one
    with active(Thresholds.with_overrides({"online.hang.min_stall_s": 2})):
        assert "no step for 6 s" in (step_stall(quiet_ns, step_ns, steps_known=10) or "")
