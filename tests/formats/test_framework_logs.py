"""`perftracker analyze job.log`: step times and throughput read from a training framework's own log, with the
one parser `attach` uses (formats/framework_steps.py) and the one rank-prefix grammar (formats/log_lines.py).

The logs are real lines from public threads (tests/fixtures/framework_logs/PROVENANCE.md). Before the formats
floor, each of these files given to analyze was "none of the inputs could be used".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import perftracker
from perftracker.formats import framework_steps
from perftracker.formats.log_lines import launcher_prefix, line_rank
from perftracker.live.samplers import steps_sampler

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "framework_logs"


@pytest.mark.parametrize(("name", "rank", "steps", "durations_ms"), [
    ("megatron.log", -1, [71, 72, 73], [5361.6, 5470.7, 5829.9]),  # Megatron's own time per iteration
    ("deepspeed.log", 0, [50, 60], [1514.5, 1514.4]),  # [Rank 0] step=N lines 15.145 s and 15.144 s apart, / 10
    ("torchtitan.log", 0, [23, 24, 25, 26, 27, 28, 29], [78, 78, 84, 97, 81, 80, 83]),  # [rank0]: ms timestamps
    ("hf_trainer_deepspeed.log", 0, [1999], [3330.0]),  # the Trainer's tqdm bar: 3.33 s/it
])
def test_a_framework_log_alone_gives_its_step_times(name: str, rank: int, steps: list[int],
                                                    durations_ms: list[float]) -> None:
    # GIVEN one real training log of a framework, and nothing else
    # WHEN it is loaded as analyze loads it
    with perftracker.load(LOGS / name, cache=False) as store:
        table = store.steps.sort_values("step")
    # THEN its steps are the ones the lines time, of the rank the lines name, to the millisecond
    assert table["rank"].unique().tolist() == [rank]
    assert table["step"].tolist() == steps
    assert (table["dur_ns"] / 1e6).round(1).tolist() == pytest.approx(durations_ms, abs=0.1)
    assert set(table["source"].astype(str)) == {"stepfile"}  # as attach writes the same lines' records


def test_analyze_of_a_megatron_log_names_its_step_time_and_throughput() -> None:
    # GIVEN a Megatron-LM log (no rank prefix); WHEN it is analyzed
    run = perftracker.analyze(LOGS / "megatron.log", cache=False)
    titles = [f.title for f in run.findings]
    # THEN the step time (the median of its three iterations) and its reported TFLOP/s are findings
    assert any("Step time 5470.7 ms" in t for t in titles), titles
    assert any("238.7 TFLOP/s per GPU" in t for t in titles), titles


def test_steps_of_a_log_beside_step_files_are_not_counted_twice(tmp_path: Path) -> None:
    # GIVEN a run directory with the hook's step files and a framework log of the same steps
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "rank-0.jsonl").write_text(
        '{"rank": 0, "step": 1, "start_ns": 1000000000, "end_ns": 2000000000}\n'
        '{"rank": 0, "step": 2, "start_ns": 2000000000, "end_ns": 3000000000}\n')
    shutil.copy(LOGS / "torchtitan.log", tmp_path / "train.log")
    # WHEN it is loaded
    with perftracker.load(tmp_path, cache=False) as store:
        steps, notes = store.steps, [n.message for n in store.notes]
    # THEN the step files time the steps and the log's step lines are said not used
    assert steps["step"].tolist() == [1, 2]
    assert any("step lines of the training log(s) are not used" in n for n in notes)


@pytest.mark.parametrize(("line", "rank"), [
    ("[default2]:iteration 3", 2), ("[rank5]: step: 3  loss: 1", 5), ("[1,7]<stdout>: step=3, skipped=0", 7),
    ("  [worker12]:x", 12), ("[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 3] step=40", 3),
    ("\x1b[32m20251202 06:56:28\x1b[0m][rank-7/8] iteration 4408/ 5000", 7), ("2024 x [rank4]: late prefix", 4),
    ("no prefix here", -1), ("[rank99999999]: too many digits", -1), (" [2024-04-06 03:02:12] iteration 71/ 100", -1),
])
def test_one_rank_grammar_for_every_log_reader(line: str, rank: int) -> None:
    # GIVEN a log line with a launcher prefix or a rank tag (or none); THEN its rank, by the one grammar
    assert line_rank(line) == rank


def test_the_job_log_reader_and_attach_use_the_same_grammar_and_parser() -> None:
    # GIVEN a torchrun prefix; THEN the post-mortem reader's prefix (rank, where the text starts) is the grammar's
    assert launcher_prefix("[rank3]: Traceback") == (3, 8)
    assert launcher_prefix("Traceback") is None
    # AND attach's step reader is the formats floor's parser, not a copy
    assert steps_sampler.StepLineParser is framework_steps.StepLineParser
