"""The one seam through which live samplers ask for a verdict: `LiveDiagnosis`, and a default that judges nothing.

Samplers collect and decide nothing; the judgments live in `perftracker.analyzers` and reach them only through
the `LiveDiagnosis` in `ctx.diagnosis` (the CLI wires in `analyzers.online.AnalyzerDiagnosis`). `NoDiagnosis`
says "nothing suspicious" to every question. A look at the ranks is rank -> `MainStack`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import pandas as pd

from perftracker.store import Store
from perftracker.store.alarms import Alarm, StepSeries
from perftracker.store.stack_frames import MainStack, StackBurst, StepPeriod

Look = Mapping[int, MainStack]  # rank -> its main thread in one round of stack dumps


class LiveDiagnosis(Protocol):
    """The verdicts live samplers need; each answer is about data the sampler itself collected. The defaults
    judge nothing."""

    def hang_pattern(self, look: Look) -> str:
        """Why this one look at the ranks seems hung, as one line ("" when it does not)."""
        return ""

    def same_picture(self, before: Look, after: Look) -> bool:
        """Do two consecutive looks show the ranks in the same place (the same stacks twice)?"""
        return False

    def stayed_blocked(self, before: Look, after: Look, seconds: float) -> bool:
        """Did the ranks that should be blocked stay blocked between two looks `seconds` apart (False when
        they kept waking up: the job loops, it is not stuck)?"""
        return False

    def step_stall(self, quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
        """Whether no step for `quiet_ns` (since the last step of any rank) is a stall: None when the steps
        known are too few to say, "" when steps keep coming, else the suspicion text."""
        return None

    def straggler_suspicion(self, profile_samples: pd.DataFrame) -> str:
        """The straggler these sampled stacks (a `profile_samples` table) show, as one line ("" when none)."""
        return ""

    def degradation_alarm(self, series: Sequence[StepSeries], window: int, rise: float) -> Alarm | None:
        """The watcher's question: did these ranks' recent steps (rank -1 = the job) get slower beyond noise:
        the mean of the last `window` steps more than `rise` above the recent best, with the step it began at?"""
        return None

    def step_period(self, burst: StackBurst) -> StepPeriod | None:
        """The iteration period one rank's sampled-stack burst shows (None: no clear period), for jobs with no other
        step signal."""
        return None

    def burst_alarm(self, series: Sequence[StepSeries], window: int, rise: float) -> Alarm | None:
        """The watcher's question for burst periods (one value per burst per rank): did they rise beyond noise?"""
        return None

    def hang_alarm(self, last_step: Mapping[int, int], last_step_ns: Mapping[int, int], median_step_ns: int | None,
                   steps_known: int, now_ns: int) -> Alarm | None:
        """The watcher's question: has the job stopped making progress (rank -> last step and its wall time)?"""
        return None

    def host_alarm(self, store: Store) -> Alarm | None:
        """The watcher's question: do these latest host counters (NVML, RDMA, net) show throttling, XIDs, link
        errors or flaps?"""
        return None


class NoDiagnosis(LiveDiagnosis):
    """The default `LiveDiagnosis`: judges nothing, so a sampler never suspects anything by itself."""
