"""What the CPU was doing while the GPU waited: the ops in the idle gaps, the longest gaps, the kernels after them,
and the top-level CPU ops that overlap given time intervals (`cpu_ops_during`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.cpu_ops import cpu_calls_view, top_level
from perftracker.analyzers.traces.grouping import Groups, Ints, codes_of
from perftracker.analyzers.traces.idle import GAP_COLUMNS, idle_gaps_view
from perftracker.analyzers.traces.intervals import covered_within, union
from perftracker.analyzers.traces.kernels import kernel_work_view, profiled_steps
from perftracker.evidence.traces import CpuOpRow, GapRow, IdleEvidence, IdleOpRow, TinyKernelRow
from perftracker.store import Store
from perftracker.values import short_symbol

NO_OP = "(no profiled CPU op)"
TOP_OPS = 15
LONGEST = 3
OPS_PER_GAP = 3
IDLE_OPS_COLUMNS = ["rank", "category", "name", "kind", "self_ns", "gap_ns", "share_pct"]
DURING_KINDS = ("cpu_op", "collective_cpu", "runtime")  # user annotations wrap regions: not what the CPU did
LONGEST_COLUMNS = ["rank", "window", "category", "step", "start_ns", "dur_ns", "cpu_ops", "next_kernel",
                   "launched_by"]


@dataclass(frozen=True)
class _Calls:
    """The call trees (`cpu_calls_view`) as arrays, with the rows of each rank window (contiguous, in order)."""

    start: Ints
    end: Ints
    parent: Ints
    name: Ints
    kind: Ints
    names: list[object]
    kinds: list[object]
    spans: dict[tuple[int, int], tuple[int, int]]

    @classmethod
    def of(cls, calls: pd.DataFrame) -> _Calls:
        name, names = codes_of(calls["name"])
        kind, kinds = codes_of(calls["kind"])
        key = calls["rank"].to_numpy(np.int64) * 65536 + calls["window"].to_numpy(np.int64)
        cut = np.flatnonzero(key[1:] != key[:-1]) + 1 if len(key) else np.empty(0, np.int64)
        spans = {(int(key[lo]) // 65536, int(key[lo]) % 65536): (lo, hi)
                 for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), len(key)]) if hi > lo}
        start = calls["start_ns"].to_numpy(np.int64)
        return cls(start, start + calls["dur_ns"].to_numpy(np.int64),
                   calls["parent"].to_numpy(np.int64), name, kind, names, kinds, spans)

    def rows(self, rank: int, window: int) -> tuple[int, int]:
        return self.spans.get((rank, window), (0, 0))

    def own(self, lo: int, hi: int, inside: Ints) -> Ints:
        """Each call's own share of `inside` (its time in the gaps minus its children's), rows lo..hi."""
        parent = self.parent[lo:hi]
        nested = parent >= 0
        children = np.bincount(parent[nested] - lo, weights=inside[nested], minlength=hi - lo).astype(np.int64)
        result: Ints = np.maximum(inside - children, 0)
        return result


def idle_ops_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank, category and CPU op: own time inside the category's idle gaps (docs/internals/analyzers.md)."""
    gaps = analysis.view(idle_gaps_view)
    if gaps.empty:
        return pd.DataFrame(columns=IDLE_OPS_COLUMNS)
    calls = _Calls.of(analysis.view(cpu_calls_view))
    parts = []
    for _, mine in gaps.sort_values("start_ns").groupby(["rank", "window"], sort=False):
        rank = int(mine["rank"].iloc[0])
        lo, hi = calls.rows(rank, int(mine["window"].iloc[0]))
        start, end = calls.start[lo:hi], calls.end[lo:hi]
        top = calls.parent[lo:hi] < 0
        busy_s, busy_e = union(start[top], end[top])
        gap_start, gap_len = mine["start_ns"].to_numpy(np.int64), mine["dur_ns"].to_numpy(np.int64)
        category_of = mine["category"].to_numpy()
        for category in dict.fromkeys(category_of.tolist()):
            lengths = np.where(category_of == category, gap_len, 0)
            gap_end = gap_start + lengths
            own = calls.own(lo, hi, covered_within(gap_start, gap_end, start, end))
            untraced = int(lengths.sum()) - int(covered_within(gap_start, gap_end, busy_s, busy_e).sum())
            used = np.flatnonzero(own > 0)
            parts.append(pd.DataFrame({"rank": rank, "category": str(category), "name_code": calls.name[lo + used],
                                       "kind_code": calls.kind[lo + used], "self_ns": own[used]}))
            parts.append(pd.DataFrame({"rank": [rank], "category": [str(category)], "name_code": [-1],
                                       "kind_code": [-1], "self_ns": [max(untraced, 0)]}))
    table = pd.concat(parts, ignore_index=True).groupby(["rank", "category", "name_code", "kind_code"],
                                                         as_index=False)[["self_ns"]].sum()
    gap_total = gaps.groupby(["rank", "category"])["dur_ns"].sum()
    table["gap_ns"] = gap_total.reindex(pd.MultiIndex.from_frame(table[["rank", "category"]])).to_numpy(np.int64)
    codes = table["name_code"].to_numpy()
    table["name"] = np.where(codes >= 0, np.array(calls.names, dtype=object)[np.clip(codes, 0, None)], NO_OP)
    table["kind"] = np.where(codes >= 0, np.array(calls.kinds, dtype=object)[np.clip(table["kind_code"], 0, None)], "")
    table = table[table["self_ns"] > 0]
    table["share_pct"] = 100.0 * table["self_ns"] / table["gap_ns"].where(table["gap_ns"] > 0)
    table = table.sort_values(["rank", "category", "self_ns"], ascending=[True, True, False])
    return table.groupby(["rank", "category"]).head(TOP_OPS)[IDLE_OPS_COLUMNS].reset_index(drop=True)


def next_kernels_view(analysis: Analysis) -> pd.DataFrame:
    """Every idle gap with the GPU work after it: kernel, family, kernel_ns, launched_by, step ("" / -1 unknown)."""
    gaps, work = analysis.view(idle_gaps_view), analysis.view(kernel_work_view)
    if gaps.empty:
        return pd.DataFrame(columns=[*GAP_COLUMNS, "kernel", "family", "kernel_ns", "launched_by", "step"])
    after = work[work["correlation"] >= 0].drop_duplicates(["rank", "window", "correlation"])
    after = after[["rank", "window", "correlation", "name", "family", "dur_ns", "launched_by", "step"]].rename(
        columns={"correlation": "next_correlation", "name": "kernel", "dur_ns": "kernel_ns"})
    joined = gaps.merge(after, how="left", on=["rank", "window", "next_correlation"])
    texts = {c: joined[c].astype(object).fillna("") for c in ("kernel", "family", "launched_by")}
    return joined.assign(**texts, **{c: joined[c].fillna(-1).astype(np.int64) for c in ("kernel_ns", "step")})


def longest_gaps_view(analysis: Analysis) -> pd.DataFrame:
    """The LONGEST (3) longest gaps of each rank and category, with the ops in each and the kernel after it."""
    gaps = analysis.view(next_kernels_view)
    if gaps.empty:
        return pd.DataFrame(columns=LONGEST_COLUMNS)
    longest = gaps.sort_values("dur_ns", ascending=False, kind="stable").groupby(["rank", "category"]).head(LONGEST)
    calls = _Calls.of(analysis.view(cpu_calls_view))
    names = np.array(calls.names, dtype=object)
    texts = []
    for gap in longest.to_dict("records"):
        lo, hi = calls.rows(int(gap["rank"]), int(gap["window"]))
        gs, ge = int(gap["start_ns"]), int(gap["start_ns"]) + int(gap["dur_ns"])
        inside = np.clip(np.minimum(calls.end[lo:hi], ge) - np.maximum(calls.start[lo:hi], gs), 0, None)
        own = calls.own(lo, hi, inside)
        order = np.argsort(-own, kind="stable")[:OPS_PER_GAP]
        texts.append("; ".join(f"{names[calls.name[lo + i]]} {_ms(int(own[i]))}" for i in order if own[i] > 0))
    out = longest.assign(cpu_ops=texts, next_kernel=longest["kernel"])
    return out.sort_values(["rank", "category", "dur_ns"], ascending=[True, True, False])[LONGEST_COLUMNS] \
        .reset_index(drop=True)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.2f} ms" if ns >= 100_000 else f"{ns / 1e3:.0f} us"


def gap_evidence(analysis: Analysis, category: str, ranks: list[int]) -> IdleEvidence:
    """The idle finding's evidence of what the CPU did in `category`'s gaps on `ranks`
    (docs/internals/analyzers.md)."""
    steps = profiled_steps(analysis.store).reindex(ranks).fillna(0).clip(lower=1)
    rank_steps = float(steps.sum()) or 1.0
    ops = analysis.view(idle_ops_view)
    ops = ops[(ops["category"] == category) & ops["rank"].isin(ranks)]
    gap_total = float(ops.drop_duplicates("rank")["gap_ns"].sum())
    per_op = ops.groupby(["name", "kind"], as_index=False)[["self_ns"]].sum().sort_values("self_ns", ascending=False)
    evidence = IdleEvidence()
    if category != "dependency":  # the work was queued: what the CPU did then is not why the GPU waited
        evidence["cpu_ops_while_idle"] = [
            IdleOpRow(op=str(r["name"]), kind=str(r["kind"]),
                      ms_per_step=round(float(r["self_ns"]) / rank_steps / 1e6, 3),
                      share_of_idle_pct=round(100.0 * float(r["self_ns"]) / gap_total, 1) if gap_total else 0.0)
            for r in per_op.head(6).to_dict("records")]
    longest = analysis.view(longest_gaps_view)
    longest = longest[(longest["category"] == category) & longest["rank"].isin(ranks)].nlargest(5, "dur_ns")
    evidence["longest_gaps"] = [
        GapRow(rank=int(g["rank"]), step=int(g["step"]), gap_ms=round(int(g["dur_ns"]) / 1e6, 3),
               cpu_ops=str(g["cpu_ops"]), next_kernel=str(g["next_kernel"])[:300], launched_by=str(g["launched_by"]))
        for g in longest.to_dict("records")]
    if category == "launch":
        evidence["tiny_kernels"] = _tiny_kernels(analysis, ranks, rank_steps)
    return evidence


def gap_headline(evidence: IdleEvidence) -> str:
    """The end of the idle finding's title: the tiny kernel waited for most and its op, or the CPU's top op."""
    tiny = evidence.get("tiny_kernels") or []
    if tiny:
        return f"; most often before {short_symbol(tiny[0]['kernel'], 60)} (launched by {tiny[0]['launched_by']})"
    ops = evidence.get("cpu_ops_while_idle") or []
    if not ops:
        return ""
    top = ops[0]
    if top["op"] == NO_OP:
        return f"; no profiled CPU op ran in {top['share_of_idle_pct']:.0f}% of that time (Python or untraced work)"
    share = f"{top['share_of_idle_pct']:.0f}% of that time"
    if top["kind"] == "annotation":  # its own time is the region's time outside every profiled op below it
        return f"; the CPU meanwhile was inside {short_symbol(top['op'], 60)}, in no profiled op below it ({share})"
    return f"; the CPU meanwhile ran {short_symbol(top['op'], 60)} ({share})"


def _tiny_kernels(analysis: Analysis, ranks: list[int], rank_steps: float) -> list[TinyKernelRow]:
    """The kernels after launch-bound gaps, by idle time before them: count, median duration, launching op."""
    gaps = analysis.view(next_kernels_view)
    gaps = gaps[(gaps["category"] == "launch") & gaps["rank"].isin(ranks) & (gaps["kernel"] != "")]
    if gaps.empty:
        return []
    groups = Groups.of(codes_of(gaps["kernel"])[0], codes_of(gaps["launched_by"])[0])
    idle = groups.sum(gaps["dur_ns"].to_numpy(np.int64))
    median = groups.quantile(gaps["kernel_ns"].to_numpy(np.int64), 0.5)
    first = gaps.iloc[groups.first]
    table = pd.DataFrame({"kernel": first["kernel"].to_numpy(), "launched_by": first["launched_by"].to_numpy(),
                          "gaps": groups.count(), "idle": idle, "median": median}).nlargest(8, "idle")
    return [TinyKernelRow(kernel=str(t["kernel"])[:300], launched_by=str(t["launched_by"]), gaps_before=int(t["gaps"]),
                          idle_before_ms_per_step=round(float(t["idle"]) / rank_steps / 1e6, 3),
                          kernel_median_us=round(float(t["median"]) / 1e3, 1)) for t in table.to_dict("records")]


def cpu_ops_during(store: Store, gaps: pd.DataFrame, limit: int = 5,
                   shapes: Mapping[tuple[int, int, int], str] | None = None) -> list[CpuOpRow]:
    """The top-level CPU work overlapping `gaps`, most time first (docs/internals/analyzers.md)."""
    if gaps.empty or not store.n_events:
        return []
    overlap: dict[str, list[float]] = {}
    seen_shapes: dict[str, Counter[str]] = {}
    total_gap = 0
    for (rank, window), mine in gaps.groupby(["rank", "window"], sort=True):
        ev = store.rank_events(int(str(rank)))  # that rank's rows alone, not a mask over every event
        cpu = ev[(ev["rank"] == rank) & (ev["window"] == window) & (ev["stream"] < 0) & ev["kind"].isin(DURING_KINDS)]
        if cpu.empty:
            continue
        cpu = cpu[top_level(cpu).to_numpy()]
        s, e = union(mine["start_ns"].to_numpy(np.int64), (mine["start_ns"] + mine["dur_ns"]).to_numpy(np.int64))
        total_gap += int((e - s).sum())
        start = cpu["start_ns"].to_numpy(np.int64)
        inside = covered_within(s, e, start, start + cpu["dur_ns"].to_numpy(np.int64))
        names = cpu["name"].astype(str).to_numpy()
        external = cpu["external_id"].to_numpy()
        key_rank, key_window = int(str(rank)), int(str(window))
        for name, ns, ext in zip(names[inside > 0], inside[inside > 0], external[inside > 0]):
            totals = overlap.setdefault(str(name), [0.0, 0.0])
            totals[0] += float(ns)
            totals[1] += 1
            shape = shapes.get((key_rank, key_window, int(ext))) if shapes else None
            if shape is not None and shape != "[]":
                seen_shapes.setdefault(str(name), Counter())[shape] += 1
    ranked = sorted(overlap.items(), key=lambda item: -item[1][0])[:limit]
    found: list[CpuOpRow] = []
    for name, (ns, count) in ranked:
        entry = CpuOpRow(op=name, ms=round(ns / 1e6, 3), share_pct=round(100.0 * ns / total_gap, 1) if total_gap
                         else 0.0, count=int(count))
        if name in seen_shapes:
            entry["input_shapes"] = seen_shapes[name].most_common(1)[0][0]
        found.append(entry)
    return found
