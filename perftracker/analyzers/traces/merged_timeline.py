"""One timeline of all ranks on one clock, with what the analysis found marked on it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Kind, Severity
from perftracker.analyzers.stragglers.collectives import arrivals_view

DEFAULT_MAX_RANKS = 64
DEFAULT_MAX_EVENTS = 2_000_000
LATE_MARK_MS = 1.0  # mark arrivals at least this late
EVENT_COLUMNS = ["rank", "host", "tid", "stream", "name", "kind", "start_ns", "dur_ns", "step"]


@dataclass(frozen=True)
class Marker:
    """An instant on one rank's track: what the analysis found there."""

    rank: int
    ts_ns: int
    name: str
    detail: str
    severity: str


@dataclass(frozen=True)
class MergedTimeline:
    events: pd.DataFrame  # EVENT_COLUMNS, start_ns on the shared clock
    markers: tuple[Marker, ...]
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    offsets_ns: dict[int, int]
    note: str


def _default_ranks(all_ranks: list[int], findings: list[Finding], analysis: Analysis) -> list[int]:
    if len(all_ranks) <= DEFAULT_MAX_RANKS:
        return all_ranks
    named = {r for f in findings if f.severity >= Severity.WARNING for r in f.ranks if r in set(all_ranks)}
    steps = analysis.store.steps
    if not steps.empty:
        medians = steps.groupby("rank")["dur_ns"].median().sort_values()
        named.add(int(str(medians.index[len(medians) // 2])))
    named.update(all_ranks[:2])
    return sorted(named)[:DEFAULT_MAX_RANKS]


def merged_timeline(analysis: Analysis, findings: list[Finding], ranks: list[int] | None = None,
                    steps: list[int] | None = None, max_events: int = DEFAULT_MAX_EVENTS) -> MergedTimeline:
    store = analysis.store
    all_ranks = store.event_ranks()
    chosen = sorted(set(ranks) & set(all_ranks)) if ranks is not None else _default_ranks(all_ranks, findings, analysis)
    part = store.ranks_events(chosen) if chosen else store.events_schema()  # the chosen ranks' rows, in table order
    all_steps = sorted(int(s) for s in part["step"].unique() if int(s) >= 0)
    wanted = sorted(set(steps) & set(all_steps)) if steps is not None else all_steps
    notes = []
    if steps is not None or all_steps:
        part = part[part["step"].isin(wanted)] if steps is not None else part
    if len(part) > max_events and wanted:  # keep the last steps that fit
        counts = part.groupby("step").size().reindex(wanted, fill_value=0)[::-1].cumsum()
        wanted = sorted(int(s) for s in counts[counts <= max_events].index) or [wanted[-1]]
        part = part[part["step"].isin(wanted)]
        notes.append(f"steps {wanted[0]}-{wanted[-1]} kept to stay under {max_events} events")
    if len(chosen) < len(all_ranks):
        notes.append(f"{len(chosen)} of {len(all_ranks)} ranks: {', '.join(map(str, chosen[:16]))}"
                     + (" ..." if len(chosen) > 16 else ""))
    aligned = analysis.view(arrivals_view)
    offsets = {int(str(r)): int(v) for r, v in aligned.offsets.items()}
    shift = part["rank"].map(lambda r: offsets.get(int(r), 0)).to_numpy(dtype=np.int64)
    out = pd.DataFrame({
        "rank": part["rank"].to_numpy(), "host": part["rank"].map({r: store.host_of(r) for r in chosen}).to_numpy(),
        "tid": part["tid"].to_numpy(), "stream": part["stream"].to_numpy(), "name": part["name"].astype(str).to_numpy(),
        "kind": part["kind"].astype(str).to_numpy(), "start_ns": part["start_ns"].to_numpy() - shift,
        "dur_ns": part["dur_ns"].to_numpy(), "step": part["step"].to_numpy()}, columns=EVENT_COLUMNS)
    markers = _late_arrivals(aligned.arrivals, chosen, findings) + _finding_marks(out, findings, chosen)
    return MergedTimeline(out, tuple(markers), tuple(chosen), tuple(wanted), offsets, "; ".join(notes))


def _late_arrivals(arrivals: pd.DataFrame, ranks: list[int], findings: list[Finding]) -> list[Marker]:
    """The collectives where a straggler the findings name arrived last, with how late."""
    stragglers = {r for f in findings if f.analyzer == Kind.STRAGGLER and f.severity >= Severity.WARNING for r in f.ranks}
    if arrivals.empty or not stragglers:
        return []
    late = arrivals[arrivals["rank"].isin(stragglers & set(ranks)) & arrivals["is_last"]
                    & (arrivals["lateness_ns"] >= LATE_MARK_MS * 1e6)]
    return [Marker(int(r["rank"]), int(r["start_aligned"]), f"late {r['lateness_ns'] / 1e6:.1f} ms",
                   "the straggler arrived last at this collective; the others waited", "warning")
            for _, r in late.head(10_000).iterrows()]


def _finding_marks(events: pd.DataFrame, findings: list[Finding], ranks: list[int]) -> list[Marker]:
    if events.empty:
        return []
    start = int(events["start_ns"].min())
    return [Marker(r, start, f"{f.severity.label}: {f.title[:80]}", f.title, f.severity.label)
            for f in findings if f.severity >= Severity.WARNING for r in f.ranks[:8] if r in set(ranks)]
