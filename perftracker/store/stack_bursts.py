"""One rank's short sampled-stack recording in time order (`StackBurst`), and the iteration period read from it
(`StepPeriod`): the records shared by `collectors/stacks/chrometrace.py`, `analyzers/online/step_period.py` and
`live/samplers/stack_steps.py`. Plain, typed records with no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StackBurst:
    """The main thread of one rank over one recording: piecewise-constant stacks in time order."""

    rank: int
    rate_hz: float  # the sampling rate asked of py-spy
    change_s: tuple[float, ...]  # when each stack began (s from the recording's start), increasing
    stacks: tuple[tuple[str, ...], ...]  # the stack from change_s[i] until change_s[i + 1] (or end_s)
    end_s: float  # when the recording ended (s from its start)
    started_ns: int = 0  # wall clock of the recording's start (time.time_ns()), 0 when not known

    @property
    def seconds(self) -> float:
        return self.end_s - (self.change_s[0] if self.change_s else self.end_s)


@dataclass(frozen=True)
class StepPeriod:
    """The iteration period found in one burst."""

    period_s: float
    confidence: float  # the peak of the stacks' self-similarity at that lag, 0..1 (1: every cycle identical)
    cycles: float  # how many periods the burst spans
    depth: int  # how many frames from the root the stack ids kept where the period was clearest
