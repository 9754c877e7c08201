"""`AnalyzerDiagnosis`: the live samplers' verdicts, given by the rules the offline analyzers judge with.

Implements `perftracker.live.diagnosis.LiveDiagnosis` structurally (analyzers never import live).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pandas as pd

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.failures.stack_state import (
    hang_pattern,
    rank_states,
    signature,
    still,
    switches_of,
)
from perftracker.analyzers.online.burst_rule import burst_alarm
from perftracker.analyzers.online.hang_rule import hang_alarm, step_stall
from perftracker.analyzers.online.host_trigger import host_alarm
from perftracker.analyzers.online.step_period import estimate_period
from perftracker.analyzers.online.step_rules import Rechecks, degradation_alarm
from perftracker.analyzers.stragglers.stack_profile import analyze_stack_profile
from perftracker.analyzers.thresholds import Thresholds, active
from perftracker.store import Store
from perftracker.store.alarms import Alarm, StepSeries
from perftracker.store.stack_bursts import StackBurst, StepPeriod
from perftracker.store.stack_frames import MainStack

SUSPICION_CHARS = 300
F = TypeVar("F", bound=Callable[..., Any])


def _judged(method: F) -> F:
    """`method` run with the session's thresholds active."""
    @functools.wraps(method)
    def run(self: AnalyzerDiagnosis, *args: Any, **kwargs: Any) -> Any:
        with active(self.thresholds):
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


class AnalyzerDiagnosis:
    """The `LiveDiagnosis` the CLI hands to live samplers (one per session: it keeps the degradation rule's
    `Rechecks`)."""

    def __init__(self, thresholds: Mapping[str, object] | None = None) -> None:
        self.rechecks = Rechecks()
        self.thresholds = Thresholds.with_overrides(thresholds)

    @_judged
    def hang_pattern(self, look: Mapping[int, MainStack]) -> str:
        return hang_pattern(rank_states(look))

    @_judged
    def same_picture(self, before: Mapping[int, MainStack], after: Mapping[int, MainStack]) -> bool:
        return signature(rank_states(before)) == signature(rank_states(after))

    @_judged
    def stayed_blocked(self, before: Mapping[int, MainStack], after: Mapping[int, MainStack], seconds: float) -> bool:
        return still(rank_states(after), switches_of(before), switches_of(after), seconds)

    @_judged
    def step_stall(self, quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
        return step_stall(quiet_ns, median_step_ns, steps_known)

    @_judged
    def straggler_suspicion(self, profile_samples: pd.DataFrame) -> str:
        store = Store()
        store.set_table("profile_samples", profile_samples)
        found = analyze_stack_profile(Analysis(store, AnalysisOptions(thresholds=self.thresholds.overrides)))
        return found[0].title[:SUSPICION_CHARS] if found else ""

    @_judged
    def degradation_alarm(self, series: Sequence[StepSeries], window: int, rise: float) -> Alarm | None:
        return degradation_alarm(series, window, rise, self.rechecks)

    @_judged
    def step_period(self, burst: StackBurst) -> StepPeriod | None:
        return estimate_period(burst)

    @_judged
    def burst_alarm(self, series: Sequence[StepSeries], window: int, rise: float) -> Alarm | None:
        return burst_alarm(series, window, rise)

    @_judged
    def hang_alarm(self, last_step: Mapping[int, int], last_step_ns: Mapping[int, int], median_step_ns: int | None,
                   steps_known: int, now_ns: int) -> Alarm | None:
        return hang_alarm(last_step, last_step_ns, median_step_ns, steps_known, now_ns)

    @_judged
    def host_alarm(self, store: Store) -> Alarm | None:
        return host_alarm(store)
