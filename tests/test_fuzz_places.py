"""The fuzzer learns places (issue 32, item 9): run directories reshaped (links inside, outside, loops,
devices, FIFOs, odd names, deep nesting, many files, hidden files, long values, planted secrets, an
output folder inside), edited output folders and edited cache entries. Fixed seeds here (about a
minute); `python scripts/fuzz.py --targets places,outputs,cache` runs the same families for longer.

Property: analyze and report exit 0, 2 or 3 within the limit, and no output holds a line from outside
the input, a planted secret or a raw escape character."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from fuzz_places import PLACES, check_cache, check_output, check_places
from fuzzing import copy_fuzz_run
from synth import SynthSpec, generate
from typer.testing import CliRunner

from perftracker.cli import app

PLACE_SEEDS = range(2)
OUTPUT_SEEDS = range(5)
CACHE_SEEDS = range(3)


def test_every_place_family_at_once(tmp_path: Path) -> None:
    # GIVEN the fuzz run reshaped by every family (links, loops, devices, FIFOs, odd names, deep nesting,
    # many files, hidden files, long values, secrets, an output folder inside) WHEN analyzed
    code, names = check_places(random.Random(32).randint, tmp_path, families=sorted(PLACES))
    # THEN (check_places asserts it) exit 0/2/3, no outside line, secret or escape in any output
    assert names == sorted(PLACES) and code in (0, 2, 3)


@pytest.mark.parametrize("seed", PLACE_SEEDS)
def test_reshaped_runs_never_crash_hang_or_leak(seed: int, tmp_path: Path) -> None:
    check_places(random.Random(seed).randint, tmp_path)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-out") / "out"
    run = copy_fuzz_run(tmp_path_factory.mktemp("fuzz-run") / "run")  # less its Nsight export (another job), options
    result = CliRunner().invoke(app, ["analyze", str(run), "-o", str(out), "--no-cache", "-q"])
    assert result.exit_code in (0, 3), result.output
    return out


@pytest.mark.parametrize("seed", OUTPUT_SEEDS)
def test_edited_output_folders_re_render_or_are_refused(seed: int, tmp_path: Path, analyzed: Path) -> None:
    check_output(random.Random(seed).randint, tmp_path, analyzed)


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fuzz-cache")
    generate(SynthSpec(ranks=2, steps=2, kernels_per_step=4, collectives_per_step=1, seed=4), root / "traces",
             gzip=True, truth_path=root / "truth.json")
    return root / "traces", root / "xdg" / "perftracker"


@pytest.mark.parametrize("seed", CACHE_SEEDS)
def test_edited_cache_entries_are_misses_never_crashes(seed: int, tmp_path: Path, cached: tuple[Path, Path]) -> None:
    traces, cache = cached
    if cache.exists():
        shutil.rmtree(cache)
    from perftracker.collectors.loading import LoadOptions, load_path

    load_path(traces, LoadOptions(cache_dir=cache, workers=1)).close()  # GIVEN a filled cache
    check_cache(random.Random(seed).randint, tmp_path, traces, cache)
