"""`AnalyzerDiagnosis`: the live samplers' verdicts, given by the rules the offline analyzers judge with.

Implements `perftracker.live.diagnosis.LiveDiagnosis` structurally (analyzers never import live).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Concatenate, ParamSpec, TypeVar

import pandas as pd

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.failures.stack_state import (
    hang_pattern,
    rank_states,
    signature,
    still,
    switches_of,
)
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.gpu_health import analyze_gpu_health
from perftracker.analyzers.health.gpu_links import analyze_gpu_links
from perftracker.analyzers.health.links import analyze_links
from perftracker.analyzers.health.rdma import analyze_rdma
from perftracker.analyzers.health.rdma_pfc import analyze_rdma_pfc
from perftracker.analyzers.online import burst_rule, step_rules
from perftracker.analyzers.online import step_period as period_rule
from perftracker.analyzers.online.step_rules import Rechecks, degradation_alarm
from perftracker.analyzers.stragglers.stack_profile import analyze_stack_profile
from perftracker.analyzers.thresholds import Thresholds, active, current
from perftracker.store import Store
from perftracker.store.alarms import Alarm, StepSeries
from perftracker.store.stack_frames import MainStack

SUSPICION_CHARS = 300
HOST_RULES = (analyze_gpu_health, analyze_gpu_links, analyze_rdma, analyze_rdma_pfc, analyze_links)
P = ParamSpec("P")
R = TypeVar("R")


def host_alarm(store: Store) -> Alarm | None:
    """The watcher's host trigger: the offline host-health rules on the latest counters, one `Alarm` (kind "host")
    or None."""
    analysis = Analysis(store, AnalysisOptions(thresholds=current().overrides))  # the watch's thresholds
    loud: list[Finding] = []
    for rule in HOST_RULES:
        try:
            found = rule(analysis)
        except Exception:  # noqa: BLE001  one rule failing on a partial window must not silence the others
            continue
        loud.extend(f for f in found if f.severity in (Severity.WARNING, Severity.CRITICAL))
    if not loud:
        return None
    ranks = tuple(sorted({int(r) for f in loud for r in f.ranks}))
    hosts = tuple(sorted({str(h) for f in loud for h in f.hosts}))
    return Alarm("host", loud[0].title, ranks=ranks, hosts=hosts, details=tuple(f.title for f in loud))


def _rule(rule: Callable[P, R]) -> Callable[Concatenate[AnalyzerDiagnosis, P], R]:
    """The analyzers' `rule` as a method, run with the session's thresholds active."""
    def run(self: AnalyzerDiagnosis, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with active(self.thresholds):
            return rule(*args, **kwargs)
    return run


class AnalyzerDiagnosis:
    """The `LiveDiagnosis` the CLI hands to live samplers (one per session: it keeps the degradation rule's
    `Rechecks`)."""

    def __init__(self, thresholds: Mapping[str, object] | None = None) -> None:
        self.rechecks = Rechecks()
        self.thresholds = Thresholds.with_overrides(thresholds)

    def hang_pattern(self, look: Mapping[int, MainStack]) -> str:
        with active(self.thresholds):
            return hang_pattern(rank_states(look))

    def same_picture(self, before: Mapping[int, MainStack], after: Mapping[int, MainStack]) -> bool:
        with active(self.thresholds):
            return signature(rank_states(before)) == signature(rank_states(after))

    def stayed_blocked(self, before: Mapping[int, MainStack], after: Mapping[int, MainStack], seconds: float) -> bool:
        with active(self.thresholds):
            return still(rank_states(after), switches_of(before), switches_of(after), seconds)

    step_stall = _rule(step_rules.step_stall)
    step_period = _rule(period_rule.estimate_period)
    burst_alarm = _rule(burst_rule.burst_alarm)
    hang_alarm = _rule(step_rules.hang_alarm)
    host_alarm = _rule(host_alarm)

    def straggler_suspicion(self, profile_samples: pd.DataFrame) -> str:
        with active(self.thresholds):
            store = Store()
            store.set_table("profile_samples", profile_samples)
            found = analyze_stack_profile(Analysis(store, AnalysisOptions(thresholds=self.thresholds.overrides)))
            return found[0].title[:SUSPICION_CHARS] if found else ""

    def degradation_alarm(self, series: Sequence[StepSeries], window: int, rise: float) -> Alarm | None:
        with active(self.thresholds):
            return degradation_alarm(series, window, rise, self.rechecks)
