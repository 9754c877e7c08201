"""Fuzzing stays (issue 14, item 8): every parser and the analyze / postmortem commands on mutated inputs.

Property: whatever a mutated input holds, a parser returns rows and notes (a trace reader may refuse
the whole file with InputError, which the user sees as a note), within a time limit; and the commands
exit 0, 2 or 3, never with an internal error (exit 70) or a crashed analyzer. The budget is bounded for
CI (about 25 s here); `python scripts/fuzz.py` runs the same targets for longer.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from fuzzing import FUZZ_RUN, TARGETS, check_cli, check_parser, cli_seeds, mutate_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PARSER_EXAMPLES = 50
CLI_EXAMPLES = 3
_SETTINGS = dict(deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=PARSER_EXAMPLES, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_every_parser_is_total_on_mutated_inputs(name: str, data: st.DataObject) -> None:
    # GIVEN one of the parser's seed files, mutated
    target = TARGETS[name]
    seed = data.draw(st.sampled_from(target.seeds), label="seed")
    mutated = mutate_file((FUZZ_RUN / seed).read_bytes(), lambda lo, hi: data.draw(st.integers(lo, hi)))
    # WHEN the parser reads it; THEN it returns (or refuses the file, where that is allowed) within the limit
    with tempfile.TemporaryDirectory() as folder:
        assert check_parser(target, seed, mutated, Path(folder), timeout_s=20) in ("ok", "refused")


@pytest.mark.parametrize("command", ["analyze", "postmortem"])
@settings(max_examples=CLI_EXAMPLES, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_the_commands_never_fail_internally_on_a_mutated_run(command: str, data: st.DataObject) -> None:
    # GIVEN the fuzz run directory with one of its files mutated
    seed = data.draw(st.sampled_from(cli_seeds()), label="seed")
    mutated = mutate_file((FUZZ_RUN / seed).read_bytes(), lambda lo, hi: data.draw(st.integers(lo, hi)))
    # WHEN the command runs on it (its own function, as typer calls it)
    with tempfile.TemporaryDirectory() as folder:
        result = check_cli(command, seed, mutated, Path(folder), timeout_s=120)
    # THEN it ends with a user-facing exit code and no analyzer or report view crashed
    assert result.exit_code in (0, 2, 3) and result.crashed == ()
