"""One timeline of all ranks on one clock, with what the analysis found marked on it (`merged_timeline`), and the
report's timeline view: one representative step per rank, as boxes per lane, small enough for hundreds of ranks
(`timeline_view`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Kind, Severity
from perftracker.analyzers.ranks.focus import rank_focus_view
from perftracker.analyzers.stragglers.collectives import arrivals_view
from perftracker.analyzers.traces.gpu_time import as_int

DEFAULT_MAX_RANKS = 64
DEFAULT_MAX_EVENTS = 2_000_000
LATE_MARK_MS = 1.0  # mark arrivals at least this late
EVENT_COLUMNS = ["rank", "host", "tid", "stream", "name", "kind", "start_ns", "dur_ns", "step"]
MAX_TIMELINE_RANKS = 16
MAX_BOXES_PER_LANE = 300
FOCUS_SLOWEST = 3  # of many ranks, the timeline shows the 3 slowest, the slowest one's peers and the median
FOCUS_PEERS = 4
TIMELINE_COLUMNS = ["rank", "lane", "kind", "name", "start_ms", "dur_ms"]


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
    if steps is not None:
        part = part[part["step"].isin(wanted)]
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


def pick_ranks(ranks: list[int], durations: pd.Series, focus: pd.DataFrame | None = None) -> list[int]:
    """All ranks when few; else the `focus` ranks among `ranks` (the FOCUS_SLOWEST slowest, FOCUS_PEERS peers,
    the median); without them the 3 fastest, the 5 slowest and a spread between, by `durations`."""
    if len(ranks) <= MAX_TIMELINE_RANKS:
        return ranks
    if focus is not None and not focus.empty:
        keep = ((focus["role"] == "slowest") & (focus["order"] <= FOCUS_SLOWEST)) | (focus["role"] == "median") \
            | (focus["role"].isin(["host peer", "rank neighbour"]) & (focus["order"] <= FOCUS_PEERS))
        present = set(ranks)
        chosen = [int(r) for r in focus.loc[keep, "rank"] if int(r) in present]
        if chosen:
            return sorted(chosen)
    ordered = list(durations.sort_values().index)
    picks = set(ordered[:3] + ordered[-5:])
    for i in np.linspace(0, len(ordered) - 1, MAX_TIMELINE_RANKS - len(picks)).astype(int):
        picks.add(ordered[i])
    return sorted(int(r) for r in picks)[:MAX_TIMELINE_RANKS]


def timeline_view(analysis: Analysis) -> pd.DataFrame:
    """Boxes (rank, lane, kind, name, start_ms, dur_ms) of one representative step per rank."""
    store = analysis.store
    steps = store.steps[store.steps["source"] == "profiler"]
    if not store.n_events or steps.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    common = steps.groupby("step")["dur_ns"].median()
    step = as_int((common - common.median()).abs().idxmin())
    per_rank = steps[steps["step"] == step].drop_duplicates("rank").set_index("rank")
    ranks = sorted(int(r) for r in per_rank.index)
    chosen = pick_ranks(ranks, per_rank["dur_ns"],
                        analysis.view(rank_focus_view) if len(ranks) > MAX_TIMELINE_RANKS else None)
    rows = []
    for rank in chosen:
        start = as_int(per_rank.loc[rank, "start_ns"])
        mine = store.rank_events(rank)
        sub = mine[(mine["rank"] == rank) & (mine["step"] == step) & (mine["kind"] != "annotation")]
        if sub.empty:
            continue
        lanes = np.where(sub["stream"] >= 0, "GPU stream " + sub["stream"].astype(str),
                         "CPU " + sub["kind"].astype(str))
        sub = sub.assign(lane=lanes)
        for lane, group in sub.groupby("lane"):
            rows.append(_merge_lane(group, rank, str(lane), start))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=TIMELINE_COLUMNS)


def _merge_lane(group: pd.DataFrame, rank: int, lane: str, origin: int) -> pd.DataFrame:
    group = group.sort_values("start_ns")
    if len(group) > MAX_BOXES_PER_LANE:  # keep the longest boxes: they carry the time
        group = group.nlargest(MAX_BOXES_PER_LANE, "dur_ns").sort_values("start_ns")
    return pd.DataFrame({
        "rank": rank, "lane": lane, "kind": group["kind"].astype(str).to_numpy(),
        "name": group["name"].astype(str).str.slice(0, 120).to_numpy(),
        "start_ms": (group["start_ns"].to_numpy() - origin) / 1e6, "dur_ms": group["dur_ns"].to_numpy() / 1e6,
    })
