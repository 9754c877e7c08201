"""What changed between two runs of a job, judged against the noise of running the same job twice.

`compare_runs(base, new)` returns a `RunComparison`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perftracker.analyzers.common import fmt_ms
from perftracker.analyzers.compare.side import RunSide
from perftracker.analyzers.findings import Cost, Finding, Severity, rank_findings
from perftracker.analyzers.stragglers.shift import lag1_autocorrelation, mann_whitney_greater
from perftracker.analyzers.stragglers.steps import is_waiting_phase
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.traces import DiffEvidence, DiffOpRow, SettingRow
from perftracker.values import robust_sigma

DEFAULT_TOLERANCE = 0.05  # a step-time regression below 5% is not a warning
COMM_KINDS = ("comm", "collective_cpu")
TOP_OPS = 8


@dataclass(frozen=True)
class RunComparison:
    """Findings and the tables behind them (op changes, per-rank changes)."""

    findings: list[Finding]
    ops: pd.DataFrame  # kind, name, rank (-1: all ranks), base_ms, new_ms, delta_ms, ratio_vs_scale, change
    ranks: pd.DataFrame  # rank, base_ms, new_ms, excess_ms, named
    scale: float
    step_change: float  # new / base median step time - 1 (nan without steps)
    regression_significant: bool
    summary: dict[str, object] = field(default_factory=dict)


def _step_test(base: np.ndarray, new: np.ndarray) -> tuple[float, float]:
    """(one-sided p that new is slower, one-sided p that new is faster), both shrunk for autocorrelation."""
    if min(len(base), len(new)) < threshold_int("diff.min_steps"):
        return 1.0, 1.0
    r = max(lag1_autocorrelation(base, new), 0.0)
    shrink = math.sqrt((1.0 - r) / (1.0 + r))
    return mann_whitney_greater(base, new, shrink), mann_whitney_greater(new, base, shrink)


def _joined(base: RunSide, new: RunSide) -> pd.DataFrame:
    """Per (rank, kind, name): ms per step on each side (0 where absent). Step markers (ProfilerStep#N, a
    new name every step) are left out."""
    joined = base.ms_per_step().merge(new.ms_per_step(), on=["rank", "kind", "name"], how="outer",
                                      suffixes=("_base", "_new"))
    joined = joined[~joined["name"].astype(str).str.startswith("ProfilerStep#")]
    # float, always: an outer join of sides where one has no rows leaves object columns (numpy's log fails on them)
    filled = joined.fillna({"ms_base": 0.0, "ms_new": 0.0}).astype({"ms_base": float, "ms_new": float})
    return filled.reset_index(drop=True)


def _own_work(joined: pd.DataFrame) -> pd.DataFrame:
    """The rows of a rank's own work: not communication, whose time is mostly waiting for the others, nor
    annotations named like a phase that includes that wait (`backward`: DDP's all-reduce runs inside it)."""
    waiting = joined["name"].astype(str).map(is_waiting_phase).astype(bool)  # bool also when there are no rows
    return joined[~joined["kind"].astype(str).isin(COMM_KINDS) & ~waiting]


def _scale(joined: pd.DataFrame, step_ms: float) -> tuple[float, float]:
    """The run-wide factor (median of the new/base ratios of the ops of some size, one vote per op per rank,
    so that one heavy op that changed does not pass for the machine) and the robust spread of log ratios."""
    both = joined[(joined["ms_base"] > 0) & (joined["ms_new"] > 0)]
    sizable = both[both["ms_base"] >= threshold("diff.min_share") * step_ms]
    both = sizable if len(sizable) >= 3 else both
    if both.empty:
        return 1.0, 0.0
    logs = np.log(both["ms_new"].to_numpy() / both["ms_base"].to_numpy())
    centre = float(np.median(logs))
    mad = robust_sigma(logs, centre)
    return math.exp(centre), mad


def _changed(base_ms: pd.Series, new_ms: pd.Series, scale: float, mad: float, step_ms: float) -> pd.Series:
    expected = base_ms * scale
    extra = new_ms - expected
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(expected > 0, new_ms / expected.where(expected > 0, 1.0), np.inf)
    far = (np.abs(np.log(np.where(ratio > 0, ratio, 1e-12))) > max(math.log(threshold("diff.change_ratio")),
                                                                   threshold("diff.mad_z") * mad))
    big = (np.abs(extra) >= max(threshold("diff.min_share") * step_ms, threshold("diff.min_ms")))
    return pd.Series(far & big, index=base_ms.index)


def _grid(joined: pd.DataFrame, side: str, ranks: list[int]) -> pd.DataFrame:
    """`side`'s ms per step as (kind, name) x rank; an op a rank does not run counts as 0 ms on that rank."""
    grid = joined.pivot_table(index=["kind", "name"], columns="rank", values=side, aggfunc="sum", observed=True)
    return grid.reindex(columns=ranks, fill_value=0.0).fillna(0.0)


def _rank_changes(joined: pd.DataFrame, scale: float, step_ms: float) -> pd.DataFrame:
    """Per rank: the op whose time changed most relative to the same op on the other ranks (a difference in
    differences, docs/internals/analyzers.md), and whether that rank is named."""
    columns = ["rank", "op", "base_ms", "new_ms", "excess_ms", "named"]
    if joined.empty or joined["rank"].nunique() < 2:
        return pd.DataFrame(columns=columns)
    ranks = sorted(int(r) for r in joined["rank"].unique())
    base, new = _grid(joined, "ms_base", ranks).align(_grid(joined, "ms_new", ranks), fill_value=0.0)
    excess = pd.DataFrame(index=base.index, columns=ranks, dtype=float)
    relative = pd.DataFrame(index=base.index, columns=ranks, dtype=float)
    for rank in ranks:
        others = [r for r in ranks if r != rank]
        peers_base, peers_new = base[others].median(axis=1), new[others].median(axis=1)
        factor = (peers_new / peers_base.where(peers_base > 0)).fillna(scale)
        expected = base[rank] * factor
        excess[rank] = new[rank] - expected
        with np.errstate(divide="ignore", invalid="ignore"):
            relative[rank] = np.log((new[rank] + 1e-3) / (expected + 1e-3))
    least_ms = threshold("diff.min_share") * step_ms
    sizable = (base.max(axis=1) >= least_ms) | (new.max(axis=1) >= least_ms)
    spread = relative[sizable].to_numpy().ravel()
    spread = spread[np.isfinite(spread)]
    noise = robust_sigma(spread)
    log_cut = max(math.log(threshold("diff.change_ratio")), threshold("diff.mad_z") * noise)
    rows = []
    names = [str(key[1]) for key in base.index]
    for rank in ranks:
        column = excess[rank].to_numpy(dtype=float)
        top = int(np.nanargmax(column)) if np.isfinite(column).any() else 0
        extra, rel = float(column[top]), float(relative[rank].to_numpy(dtype=float)[top])
        rows.append({"rank": rank, "op": names[top], "base_ms": float(base[rank].to_numpy(dtype=float)[top]),
                     "new_ms": float(new[rank].to_numpy(dtype=float)[top]), "excess_ms": extra,
                     "named": bool(extra >= max(threshold("diff.min_share") * step_ms,
                                                threshold("diff.min_ms")) and rel > log_cut)})
    table = pd.DataFrame(rows, columns=columns)
    if int(table["named"].sum()) * 2 >= len(ranks):  # half the ranks or more: a job-wide change, not a rank's
        table["named"] = False
    return table


def _op_rows(joined: pd.DataFrame, ranks: list[int], scale: float, mad: float, step_ms: float) -> pd.DataFrame:
    """Per (kind, name) over `ranks` (median over them): base and new ms per step and whether it changed."""
    part = joined[joined["rank"].isin(ranks)]
    if part.empty:
        return pd.DataFrame(columns=["kind", "name", "base_ms", "new_ms", "delta_ms", "ratio_vs_scale", "change"])
    agg = pd.DataFrame({side: _grid(part, side, sorted(set(ranks))).median(axis=1)
                        for side in ("ms_base", "ms_new")}).reset_index()
    changed = _changed(agg["ms_base"], agg["ms_new"], scale, mad, step_ms)
    agg = agg.rename(columns={"ms_base": "base_ms", "ms_new": "new_ms"})
    agg["delta_ms"] = agg["new_ms"] - scale * agg["base_ms"]
    agg["ratio_vs_scale"] = np.where(agg["base_ms"] > 0, agg["new_ms"] / (scale * agg["base_ms"].where(
        agg["base_ms"] > 0, 1.0)), np.inf)
    agg["change"] = np.select([~changed, agg["base_ms"] == 0, agg["new_ms"] == 0, agg["delta_ms"] > 0],
                              ["same", "new", "gone", "slower"], "faster")
    return agg.sort_values("delta_ms", key=lambda s: -s.abs(), ignore_index=True)


def _op_list(ops: pd.DataFrame) -> list[DiffOpRow]:
    moved = ops[ops["change"] != "same"].head(TOP_OPS)
    return [DiffOpRow(name=str(r["name"]), kind=str(r["kind"]), change=str(r["change"]),
                      base_ms_per_step=round(float(r["base_ms"]), 3), new_ms_per_step=round(float(r["new_ms"]), 3),
                      extra_ms_per_step=round(float(r["delta_ms"]), 3)) for _, r in moved.iterrows()]


def compare_runs(base: RunSide, new: RunSide, tolerance: float = DEFAULT_TOLERANCE) -> RunComparison:
    """See docs/internals/analyzers.md."""
    base_steps, new_steps = base.job_steps_s(), new.job_steps_s()
    b = float(np.median(base_steps)) if len(base_steps) else float("nan")
    n = float(np.median(new_steps)) if len(new_steps) else float("nan")
    step_ms = b * 1e3 if b == b else 0.0
    change = n / b - 1.0 if b == b and n == n and b > 0 else float("nan")
    p_slower, p_faster = _step_test(base_steps, new_steps)
    everything = _joined(base, new)
    joined = _own_work(everything)
    scale, mad = _scale(joined, step_ms)
    ranks = _rank_changes(joined, scale, step_ms)
    named = [int(r) for r in ranks.loc[ranks["named"], "rank"]] if not ranks.empty else []
    all_ranks = sorted(int(r) for r in joined["rank"].unique()) if not joined.empty else []
    peers = [r for r in all_ranks if r not in named]
    job_ops = _op_rows(joined, peers or all_ranks, scale, mad, step_ms)
    findings: list[Finding] = []
    for rank in named:
        findings.append(_rank_finding(rank, _op_rows(joined, [rank], scale, mad, step_ms), ranks, step_ms))
    job_moved = job_ops[job_ops["change"] != "same"]
    explained_ms = float(job_moved["delta_ms"].clip(lower=0).max()) if not job_moved.empty else 0.0
    explained_ms += float(ranks.loc[ranks["named"], "excess_ms"].max()) if named else 0.0
    significant = p_slower <= threshold("diff.alpha") and change == change and change > 0
    findings.append(_step_finding(b, n, change, p_slower, p_faster, scale, explained_ms, tolerance, base, new))
    if not job_moved.empty:
        regression = significant and change > tolerance
        findings.append(_job_ops_finding(job_ops, scale, regression, step_ms))
    findings += _comm_finding(everything, scale)
    findings += _settings_findings(base, new)
    findings += _findings_delta(base, new)
    table = pd.concat([job_ops.assign(rank=-1)] + [
        _op_rows(joined, [r], scale, mad, step_ms).assign(rank=r) for r in named], ignore_index=True)
    summary = {"base": base.label, "new": new.label, "base_step_ms": round(step_ms, 3),
               "new_step_ms": round(n * 1e3, 3) if n == n else None,
               "step_change": round(change, 4) if change == change else None, "scale": round(scale, 4),
               "p_slower": round(p_slower, 6), "p_faster": round(p_faster, 6), "changed_ranks": named}
    return RunComparison(rank_findings(findings), table, ranks, scale, change, significant, summary)


def _step_finding(b: float, n: float, change: float, p_slower: float, p_faster: float, scale: float,
                  explained_ms: float, tolerance: float, base: RunSide, new: RunSide) -> Finding:
    evidence = DiffEvidence(
        base_step_ms=round(b * 1e3, 3) if b == b else None, new_step_ms=round(n * 1e3, 3) if n == n else None,
        base_steps=len(base.job_steps_s()), new_steps=len(new.job_steps_s()), p_slower=round(p_slower, 6),
        p_faster=round(p_faster, 6), uniform_scale=round(scale, 4), explained_ms_per_step=round(explained_ms, 3),
        tolerance=tolerance)
    if change != change:
        return Finding("diff", Severity.INFO, "No step times on one side: only ops and settings are compared",
                       "Profile with ProfilerStep markers (torch.profiler schedule) or write step files.",
                       evidence, key="diff:steps")
    what = f"Step time {fmt_ms(b)} -> {fmt_ms(n)} ({100 * change:+.0f}%)"
    delta_s = n - b
    if p_slower > threshold("diff.alpha") and p_faster > threshold("diff.alpha"):
        return Finding("diff", Severity.INFO, f"{what}: within the two runs' noise",
                       "No step-time change beyond how much each run's own steps vary: profile more steps to tell "
                       "a smaller change.", evidence, confidence=1.0 - min(p_slower, p_faster), key="diff:steps")
    if change < 0:
        return Finding("diff", Severity.INFO, f"{what}: faster", "An improvement; the op changes below say where.",
                       evidence, confidence=1.0 - p_faster, key="diff:steps")
    uniform = explained_ms < 0.5 * delta_s * 1e3
    if uniform:
        return Finding("diff", Severity.INFO,
                       f"{what}, with every op {100 * (scale - 1):+.0f}% alike: the machine ran slower, not the job",
                       "A slowdown that scales every op alike is what a different or busier machine looks like (GPU "
                       "clocks, thermals, power caps, other processes, a different node type): compare the two runs' "
                       "host-health findings and node placement before looking at the code.",
                       evidence, confidence=1.0 - p_slower, cost=Cost(delta_s, delta_s / n), key="diff:steps")
    severity = Severity.WARNING if change > tolerance else Severity.INFO
    if change > threshold("diff.critical_change"):
        severity = Severity.CRITICAL
    return Finding("diff", severity, f"{what}: a regression; the ops and ranks below explain "
                   f"{fmt_ms(explained_ms / 1e3)} of the {fmt_ms(delta_s)} per step",
                   "See the changed rank and op findings of this diff for where the time went, and the settings "
                   "that differ between the runs.", evidence, confidence=1.0 - p_slower,
                   cost=Cost(delta_s, delta_s / n), key="diff:steps")


def _rank_finding(rank: int, ops: pd.DataFrame, ranks: pd.DataFrame, step_ms: float) -> Finding:
    row = ranks[ranks["rank"] == rank].iloc[0]
    extra_s = float(row["excess_ms"]) / 1e3
    listed = _op_list(ops)
    names = ", ".join(o["name"] for o in listed[:3]) or str(row["op"])
    evidence = DiffEvidence(
        rank=rank, top_op=str(row["op"]), top_op_base_ms=round(float(row["base_ms"]), 3),
        top_op_new_ms=round(float(row["new_ms"]), 3), excess_ms_per_step=round(float(row["excess_ms"]), 3), ops=listed,
        peers_excess_ms={str(int(r["rank"])): round(float(r["excess_ms"]), 3) for _, r in ranks.iterrows()
                         if int(r["rank"]) != rank})
    return Finding("diff", Severity.WARNING,
                   f"Rank {rank} changed: {row['op']} {fmt_ms(float(row['base_ms']) / 1e3)} -> "
                   f"{fmt_ms(float(row['new_ms']) / 1e3)} per step, {fmt_ms(extra_s)} more than its peers' change; "
                   f"its peers did not change (ops: {names})",
                   f"Only rank {rank}'s own work changed between the runs: look at what differs for that rank "
                   "(its inputs or data shard, rank-dependent code such as logging or evaluation on one rank, its "
                   "host and device).", evidence, ranks=(rank,),
                   cost=Cost(extra_s, extra_s * 1e3 / step_ms if step_ms else 0.0), key=f"diff:rank:{rank}")


def _job_ops_finding(ops: pd.DataFrame, scale: float, regression: bool, step_ms: float) -> Finding:
    listed = _op_list(ops)
    slower = [o for o in listed if o["extra_ms_per_step"] > 0]
    extra_ms = sum(o["extra_ms_per_step"] for o in slower[:1])
    names = ", ".join(f"{o['name']} ({o['change']})" for o in listed[:4])
    return Finding("diff", Severity.WARNING if regression and slower else Severity.INFO,
                   f"{len(ops[ops['change'] != 'same'])} op(s) changed on every rank beyond the run-wide "
                   f"{100 * (scale - 1):+.0f}%: {names}",
                   "These ops changed on every rank alike: a code, model, data or library change (shapes, kernels "
                   "chosen, settings) rather than one rank or the machine.",
                   DiffEvidence(ops=listed, uniform_scale=round(scale, 4)),
                   cost=Cost(extra_ms / 1e3, extra_ms / step_ms if step_ms else 0.0) if regression else Cost(),
                   key="diff:ops")


def _comm_finding(joined: pd.DataFrame, scale: float) -> list[Finding]:
    if joined.empty:
        return []
    kind, ranks = joined["kind"].astype(str), max(int(joined["rank"].nunique()), 1)
    (b_comm, n_comm), (b_cmp, n_cmp) = (  # per rank: base and new ms of communication, of compute and CPU ops
        [float(joined.loc[rows, side].sum()) / ranks for side in ("ms_base", "ms_new")]
        for rows in (kind.isin(COMM_KINDS), kind.isin(("compute", "cpu_op"))))
    if b_comm == 0 and n_comm == 0:
        return []
    return [Finding("diff", Severity.INFO,
                    f"Communication {b_comm:.1f} -> {n_comm:.1f} ms per step per rank; compute and CPU ops "
                    f"{b_cmp:.1f} -> {n_cmp:.1f} ms (run-wide factor {scale:.2f})",
                    "Context: a shift toward communication with compute unchanged points at the network or the "
                    "collectives' settings; the reverse at the model or the device.",
                    DiffEvidence(base_comm_ms=round(b_comm, 3), new_comm_ms=round(n_comm, 3),
                                 base_compute_ms=round(b_cmp, 3), new_compute_ms=round(n_cmp, 3)), key="diff:comm")]


def _settings_findings(base: RunSide, new: RunSide) -> list[Finding]:
    a, b = base.setting_values(), new.setting_values()
    changed = sorted(k for k in set(a) | set(b) if a.get(k, frozenset()) != b.get(k, frozenset()))
    if not changed:
        return []
    rows = [SettingRow(key=k, base=sorted(a.get(k, frozenset()))[:4], new=sorted(b.get(k, frozenset()))[:4])
            for k in changed[:64]]
    shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    return [Finding("diff", Severity.INFO, f"{len(changed)} setting(s) differ between the runs: {shown}",
                    "Settings that differ are context: they matter where a step-time or op change above goes with "
                    "them.", DiffEvidence(settings=rows), key="diff:settings")]


def _findings_delta(base: RunSide, new: RunSide) -> list[Finding]:
    def loud(side: RunSide) -> dict[str, str]:
        return {f.id: f.title for f in side.findings if f.severity >= Severity.WARNING}

    a, b = loud(base), loud(new)
    appeared = [b[k] for k in b if k not in a]
    resolved = [a[k] for k in a if k not in b]
    if not appeared and not resolved:
        return []
    return [Finding("diff", Severity.INFO,
                    f"Findings: {len(appeared)} new, {len(resolved)} resolved since the base run",
                    "The per-run reports hold each finding with its evidence.",
                    DiffEvidence(new=appeared[:32], resolved=resolved[:32]), key="diff:findings")]
