"""Measure how often straggler-type diagnoses are right on the real-job accuracy corpus.

Promise: ``python scripts/measure_accuracy.py [FOLDER] [--only NAME,...] [--json FILE]`` analyzes every
run listed in ``FOLDER/runs.json`` (default ``tests/fixtures/accuracy``, recorded by
``scripts/record_accuracy_runs.py``) twice, for ``perftracker.analyze``'s findings (loaded, analyzed and
passed as ``analyze`` does, without computing its report views):

* ``traces``: from the traces alone: a copy of the run without ``steps/`` (and without the py-spy
  ``profiles/``, which are not traces either);
* ``all``: from everything in the run directory.

For the straggler-type analyzers (``ANALYZERS``: ``straggler``, ``steps``, ``stack_profile``,
``degradation``) it tallies, per mode:

* clean runs (no rank slowed): how many got any warning/critical finding of these analyzers (the
  false-positive rate, with counts), per analyzer too, and every such finding's title;
* slowed runs, per scenario: in how many the slowed rank is in the ``ranks`` of a warning/critical
  finding of these analyzers (the detection rate), per analyzer too, and how many also named
  another rank in such a finding;
* slowed runs that runs.json marks ``expect_named: false`` (a slowdown this machine does not make
  real, ``expect_named_why`` says why): apart, per scenario, with the same counts and each run's
  outcome, never in the detection rate.

It prints a table and, with ``--json FILE``, writes the tally and every run's findings of these
analyzers. A run that fails to analyze is counted as an error, never as a pass. ``measure(folder)``
returns the same tally (``Tally.as_dict()``), for tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CORPUS = REPO / "tests" / "fixtures" / "accuracy"
ANALYZERS = ("straggler", "steps", "stack_profile", "degradation")
LOUD = ("warning", "critical")
MODES = ("traces", "all")
NOT_TRACES = ("steps", "profiles")  # left out of the traces-only copy


@dataclass(frozen=True)
class RunTruth:
    """One corpus run and what was done to it (from runs.json)."""

    name: str
    scenario: str
    layout: str
    slowed_rank: int | None
    path: Path
    expect_named: bool = True  # slowed runs: False where runs.json says the slowdown does not bind here
    expect_named_why: str = ""

    @property
    def clean(self) -> bool:
        return self.slowed_rank is None


@dataclass(frozen=True)
class Outcome:
    """The straggler-type findings of one run analyzed in one mode (`error` set when it failed)."""

    run: RunTruth
    mode: str
    findings: tuple[dict[str, Any], ...] = ()
    error: str = ""
    seconds: float = 0.0
    inspected: dict[str, Any] = field(default_factory=dict)  # what `analyze`'s `inspect` read off the analysis

    @property
    def loud(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f.get("severity") in LOUD and f.get("analyzer") in ANALYZERS]

    def loud_by(self, analyzer: str) -> list[dict[str, Any]]:
        return [f for f in self.loud if f.get("analyzer") == analyzer]

    def names(self, rank: int, analyzer: str | None = None) -> bool:
        found = self.loud if analyzer is None else self.loud_by(analyzer)
        return any(rank in (f.get("ranks") or ()) for f in found)

    def names_other_than(self, rank: int) -> bool:
        return any(set(f.get("ranks") or ()) - {rank} for f in self.loud)


def read_corpus(folder: Path, only: Sequence[str] = ()) -> list[RunTruth]:
    """The runs of `folder/runs.json` (those named in `only`, if given), each checked to exist."""
    index_path = folder / "runs.json"
    if not index_path.is_file():
        raise SystemExit(f"{index_path}: no runs.json here; record a corpus with scripts/record_accuracy_runs.py "
                         "or point at the folder holding one")
    index = json.loads(index_path.read_text(encoding="utf-8"))
    runs = [RunTruth(r["name"], r["scenario"], r["layout"], r["slowed_rank"], folder / r["name"],
                     expect_named=r.get("expect_named") is not False, expect_named_why=r.get("expect_named_why") or "")
            for r in index["runs"] if not only or r["name"] in only]
    unknown = sorted(set(only) - {r.name for r in runs})
    if unknown:
        raise SystemExit(f"{index_path}: no runs named {unknown}")
    missing = [r.name for r in runs if not (r.path / "manifest.json").is_file()]
    if missing:
        raise SystemExit(f"{folder}: runs.json lists runs that are not there: {missing}; re-record them with "
                         "scripts/record_accuracy_runs.py --only NAME --replace")
    return runs


def traces_only_copy(run_dir: Path, dest: Path) -> Path:
    """A copy of `run_dir` at `dest` without the step files (and stack profiles)."""
    shutil.copytree(run_dir, dest, ignore=lambda folder, names: [n for n in names if
                                                                   Path(folder) == run_dir and n in NOT_TRACES])
    return dest


def analyze(run: RunTruth, mode: str, scratch: Path,
            inspect: Callable[[Any], dict[str, Any]] | None = None) -> Outcome:
    """Analyze `run` in `mode` ('traces' or 'all'); keep the findings of `ANALYZERS`, and what `inspect` reads off
    the same `Analysis` (its views are computed once for both)."""
    import perftracker
    from perftracker.analyzers.analysis import Analysis
    from perftracker.pipeline import findings_of

    start = time.monotonic()
    source = run.path if mode == "all" else traces_only_copy(run.path, scratch / f"{run.name}-traces")
    try:
        with perftracker.load(source, cache=False, workers=1) as store:
            analysis = Analysis(store)
            documented = [f.to_dict() for f in findings_of(analysis)]  # analyze's findings, without its views
            inspected = inspect(analysis) if inspect is not None else {}
    except Exception as exc:  # noqa: BLE001 - counted as an error, reported with the run
        return Outcome(run, mode, error=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - start)
    findings = tuple(
        {key: f.get(key) for key in ("analyzer", "severity", "title", "ranks", "hosts")}
        for f in documented if f.get("analyzer") in ANALYZERS)
    return Outcome(run, mode, findings, seconds=time.monotonic() - start, inspected=inspected)


@dataclass
class Rate:
    hits: int = 0
    runs: int = 0

    def add(self, hit: bool) -> None:
        self.hits += int(hit)
        self.runs += 1

    def as_dict(self) -> dict[str, Any]:
        return {"hits": self.hits, "runs": self.runs, "rate": round(self.hits / self.runs, 3) if self.runs else None}

    def __str__(self) -> str:
        return f"{self.hits}/{self.runs}" + (f" ({100 * self.hits / self.runs:.0f}%)" if self.runs else "")


@dataclass
class ModeTally:
    """One mode's tally: false positives on clean runs, detections per slowed scenario."""

    false_positive: Rate = field(default_factory=Rate)
    false_positive_by: dict[str, Rate] = field(default_factory=lambda: {a: Rate() for a in ANALYZERS})
    false_positives: list[dict[str, Any]] = field(default_factory=list)
    detected: dict[str, Rate] = field(default_factory=dict)  # scenario -> rate
    detected_by: dict[str, dict[str, Rate]] = field(default_factory=dict)  # scenario -> analyzer -> rate
    named_others: dict[str, Rate] = field(default_factory=dict)  # scenario -> slowed runs naming another rank
    # slowed runs not expected to be named (runs.json expect_named: false): shown apart, never in `detected`
    unexpected: dict[str, Rate] = field(default_factory=dict)  # scenario -> slowed rank named anyway
    unexpected_by: dict[str, dict[str, Rate]] = field(default_factory=dict)
    unexpected_named_others: dict[str, Rate] = field(default_factory=dict)
    unexpected_runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        run = outcome.run
        if outcome.error:
            self.errors.append(f"{run.name}: {outcome.error}")
            return
        if run.slowed_rank is None:
            self.false_positive.add(bool(outcome.loud))
            for analyzer in ANALYZERS:
                self.false_positive_by[analyzer].add(bool(outcome.loud_by(analyzer)))
            self.false_positives += [{"run": run.name, "layout": run.layout} | f for f in outcome.loud]
            return
        scenario = run.scenario
        if run.expect_named:
            detected, detected_by, named_others = self.detected, self.detected_by, self.named_others
        else:
            detected, detected_by, named_others = self.unexpected, self.unexpected_by, self.unexpected_named_others
            self.unexpected_runs.append({
                "run": run.name, "scenario": scenario, "slowed_rank": run.slowed_rank,
                "named": outcome.names(run.slowed_rank), "named_others": outcome.names_other_than(run.slowed_rank),
                "why": run.expect_named_why})
        detected.setdefault(scenario, Rate()).add(outcome.names(run.slowed_rank))
        by = detected_by.setdefault(scenario, {a: Rate() for a in ANALYZERS})
        for analyzer in ANALYZERS:
            by[analyzer].add(outcome.names(run.slowed_rank, analyzer))
        named_others.setdefault(scenario, Rate()).add(outcome.names_other_than(run.slowed_rank))

    def as_dict(self) -> dict[str, Any]:
        return {
            "clean_runs_with_loud_finding": self.false_positive.as_dict(),
            "clean_runs_with_loud_finding_by_analyzer": {a: r.as_dict() for a, r in self.false_positive_by.items()},
            "false_positives": self.false_positives,
            "slowed_rank_named": {s: r.as_dict() for s, r in sorted(self.detected.items())},
            "slowed_rank_named_by_analyzer": {s: {a: r.as_dict() for a, r in by.items()}
                                              for s, by in sorted(self.detected_by.items())},
            "slowed_runs_naming_another_rank": {s: r.as_dict() for s, r in sorted(self.named_others.items())},
            "not_expected_slowed_rank_named": {s: r.as_dict() for s, r in sorted(self.unexpected.items())},
            "not_expected_slowed_rank_named_by_analyzer": {s: {a: r.as_dict() for a, r in by.items()}
                                                           for s, by in sorted(self.unexpected_by.items())},
            "not_expected_naming_another_rank": {s: r.as_dict()
                                                 for s, r in sorted(self.unexpected_named_others.items())},
            "not_expected_runs": self.unexpected_runs,
            "errors": self.errors,
        }


@dataclass
class Tally:
    modes: dict[str, ModeTally] = field(default_factory=lambda: {m: ModeTally() for m in MODES})
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.modes[outcome.mode].add(outcome)
        self.outcomes.append(outcome)

    def as_dict(self) -> dict[str, Any]:
        return {"analyzers": list(ANALYZERS), "seconds": round(self.seconds, 1),
                "modes": {m: t.as_dict() for m, t in self.modes.items()},
                "runs": [{"run": o.run.name, "scenario": o.run.scenario, "layout": o.run.layout,
                          "slowed_rank": o.run.slowed_rank, "mode": o.mode, "error": o.error,
                          "seconds": round(o.seconds, 1), "findings": list(o.findings)} for o in self.outcomes]}


def measure(folder: Path = CORPUS, only: Sequence[str] = (), modes: Sequence[str] = MODES,
            progress: bool = False) -> Tally:
    """Analyze every run of the corpus at `folder` in each of `modes` and tally the outcomes."""
    tally = Tally({m: ModeTally() for m in modes})
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="perftracker-accuracy-") as tmp:
        for run in read_corpus(folder, only):
            for mode in modes:
                outcome = analyze(run, mode, Path(tmp))
                tally.add(outcome)
                if progress:
                    loud = ", ".join(f"{f['analyzer']}:{f['severity']}:{f['ranks']}" for f in outcome.loud)
                    print(f"  {run.name:26} {mode:6} {outcome.seconds:5.1f} s  "
                          f"{outcome.error or loud or '-'}", file=sys.stderr, flush=True)
    tally.seconds = time.monotonic() - start
    return tally


def render(tally: Tally) -> str:
    """The tally as a readable table, and the titles of every false positive."""
    lines: list[str] = []
    for mode, t in tally.modes.items():
        source = "traces alone (no steps/, no profiles/)" if mode == "traces" else "everything in the run"
        lines.append(f"== from {source} ==")
        lines.append(f"clean runs with a warning/critical {'/'.join(ANALYZERS)} finding: {t.false_positive}")
        lines.append("  by analyzer: " + ", ".join(f"{a} {r}" for a, r in t.false_positive_by.items()))
        header = f"  {'slowed scenario':16} {'named':>10} " + " ".join(f"{a:>14}" for a in ANALYZERS) + \
            f" {'also others':>12}"
        lines.append(header)
        for scenario, rate in sorted(t.detected.items()):
            by = t.detected_by[scenario]
            lines.append(f"  {scenario:16} {str(rate):>10} " + " ".join(f"{str(by[a]):>14}" for a in ANALYZERS)
                         + f" {str(t.named_others[scenario]):>12}")
        if t.unexpected:
            lines.append("  not expected to be named (not in the rates above):")
            for scenario, rate in sorted(t.unexpected.items()):
                by = t.unexpected_by[scenario]
                lines.append(f"  {scenario:16} {str(rate):>10} " + " ".join(f"{str(by[a]):>14}" for a in ANALYZERS)
                             + f" {str(t.unexpected_named_others[scenario]):>12}")
            for why in sorted({r["why"] for r in t.unexpected_runs}):
                runs = [r for r in t.unexpected_runs if r["why"] == why]
                lines.append(f"    {', '.join(r['run'] + (' (named)' if r['named'] else '') for r in runs)}: "
                             f"{why or 'no reason given'}")
        if t.false_positives:
            lines.append("  false positives:")
            lines += [f"    {f['run']} ({f['layout']}): {f['analyzer']} {f['severity']} ranks {f['ranks']}: "
                      f"{f['title']}" for f in t.false_positives]
        if t.errors:
            lines.append("  errors: " + "; ".join(t.errors))
        lines.append("")
    lines.append(f"analyzed {len(tally.outcomes)} run-modes in {tally.seconds:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=CORPUS, help="corpus folder (with runs.json)")
    parser.add_argument("--only", default="", help="comma-separated run names")
    parser.add_argument("--modes", default=",".join(MODES), help=f"from {','.join(MODES)}")
    parser.add_argument("--json", type=Path, help="write the tally and every run's findings here")
    parser.add_argument("-q", "--quiet", action="store_true", help="no per-run progress on stderr")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    only = [n for n in args.only.split(",") if n]
    tally = measure(args.folder.resolve(), only, modes, progress=not args.quiet)
    print(render(tally))
    if args.json:
        args.json.write_text(json.dumps(tally.as_dict(), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
