"""`diff` compares two runs of one job, and its verdict agrees with its exit code. The probe's cases: two
different jobs called "+247% within the two runs' noise"; a real 2x slowdown printed "No change beyond
the noise" yet exited 3."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from synth import SynthSpec, generate
from typer.testing import CliRunner

from perftracker.cli import app

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("diffjobs") / "ddp"
    result = CliRunner().invoke(app, ["analyze", str(SAMPLES / "ddp-gloo-4rank-slow-rank2"), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out


def test_two_different_jobs_are_refused_unless_asked(saved: Path, tmp_path: Path) -> None:
    # GIVEN the 4-rank DDP sample and a 2-rank synthetic job of other ops
    other = tmp_path / "other"
    generate(SynthSpec(ranks=2, steps=4, kernels_per_step=6, collectives_per_step=2, seed=9), other / "traces",
             gzip=True, truth_path=other / "ground_truth.json")
    # WHEN diffed THEN refused with exit 2 saying why and what to do
    refused = CliRunner().invoke(app, ["diff", str(saved), str(other / "traces")])
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "look like different jobs" in text and "--allow-different-jobs" in text
    # AND compared when asked
    allowed = CliRunner().invoke(app, ["diff", str(saved), str(other / "traces"), "--allow-different-jobs", "-q"])
    assert allowed.exit_code == 0, allowed.output


def test_a_slowdown_that_fails_the_gate_is_said_in_the_verdict(saved: Path, tmp_path: Path) -> None:
    # GIVEN the same run saved twice, the second with every step and op twice as long (the machine slower)
    slow = Path(shutil.copytree(saved, tmp_path / "slow"))
    for name, column in (("steps", "dur_ns"), ("op_totals", "total_ns")):
        table = pd.read_parquet(slow / "tables" / f"{name}.parquet")
        table[column] = table[column] * 2
        table.to_parquet(slow / "tables" / f"{name}.parquet", index=False)
    # WHEN diffed with a regression gate
    result = CliRunner().invoke(app, ["diff", str(saved), str(slow), "--fail-on-regression", "5", "-q"])
    # THEN the exit code and the verdict tell the same story
    assert result.exit_code == 3, result.output
    assert "No change beyond the noise" not in result.output and "--fail-on-regression 5%" in result.output
