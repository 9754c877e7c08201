"""`AnalyzerDiagnosis`: the live samplers' verdicts, given by the rules the offline analyzers judge with.

Promise: implements `perftracker.live.diagnosis.LiveDiagnosis` (structurally: analyzers never import
live). Hang questions go to `analyzers/failures/stack_state.py` (the rules of the `hang` analyzer:
rank states, the same-picture signature, the "stayed blocked" test on context switches, the hang
pattern); the straggler question runs the `stack_profile` analyzer on the recorded samples, so the
live panel's suspicion is the title of the finding `analyze` will report. The step-stall rule is
here (no offline analyzer has one): no step for STALL_FACTOR x the median step time, and for at
least MIN_STALL_S, once MIN_STEPS step times are known.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.failures.stack_state import (
    hang_pattern,
    rank_states,
    signature,
    still,
    switches_of,
)
from perftracker.analyzers.stragglers.stack_profile import analyze_stack_profile
from perftracker.store import Store
from perftracker.store.stack_frames import MainStack

STALL_FACTOR = 5.0  # a pause this many median steps long is a stall
# Floor: step records reach the sampler by polling (about a second late), and a native hang dump pauses
# the job, so a pause must last this long too before it counts.
MIN_STALL_S = 10.0
MIN_STEPS = 3  # fewer known step times say nothing about the pace
SUSPICION_CHARS = 300


def step_stall(quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
    """None when the steps known are too few to judge, "" when they keep coming, else why it is a stall."""
    if median_step_ns is None or quiet_ns is None or steps_known < MIN_STEPS:
        return None
    if quiet_ns <= max(STALL_FACTOR * median_step_ns, MIN_STALL_S * 1e9):
        return ""
    return (f"no step for {quiet_ns / 1e9:.0f} s ({STALL_FACTOR:g}x the median step time is "
            f"{STALL_FACTOR * median_step_ns / 1e9:.1f} s)")


class AnalyzerDiagnosis:
    """The `LiveDiagnosis` the CLI hands to live samplers."""

    def hang_pattern(self, look: Mapping[int, MainStack]) -> str:
        return hang_pattern(rank_states(look))

    def same_picture(self, before: Mapping[int, MainStack], after: Mapping[int, MainStack]) -> bool:
        return signature(rank_states(before)) == signature(rank_states(after))

    def stayed_blocked(self, before: Mapping[int, MainStack], after: Mapping[int, MainStack], seconds: float) -> bool:
        return still(rank_states(after), switches_of(before), switches_of(after), seconds)

    def step_stall(self, quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
        return step_stall(quiet_ns, median_step_ns, steps_known)

    def straggler_suspicion(self, profile_samples: pd.DataFrame) -> str:
        store = Store()
        store.set_table("profile_samples", profile_samples)
        found = analyze_stack_profile(Analysis(store))
        return found[0].title[:SUSPICION_CHARS] if found else ""
