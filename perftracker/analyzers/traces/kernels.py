"""The top GPU kernels and CPU ops by total time, per rank and across ranks, over the window and per step; kernel
families from GPU kernel names (`family_of`: the one place that says which family a GPU kernel belongs to)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.traces.cpu_ops import cpu_calls_view, launch_ops
from perftracker.analyzers.traces.gpu_time import as_int, gpu_work_view
from perftracker.analyzers.traces.grouping import Groups, Ints, codes_of
from perftracker.analyzers.traces.per_rank import rank_chunks
from perftracker.store import Store

FAMILIES = ("GEMM", "attention", "convolution", "reduction", "elementwise", "communication", "memory", "other")

FAMILY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((family, re.compile(pattern, re.IGNORECASE)) for
                                                              family, pattern in (
    ("attention", r"fmha|flash|attention|attn|sdpa|scaled_dot_product|(^|[^a-z])mha[^a-z]"),
    # "conv" only as a whole name part: `conv2d`, `grouped_conv_fwd`, `cudnnConvolution`, `convolve`, never the
    # `Conv` of `_typeConvert` (a fused RMS-norm kernel's helper) or `convert`
    ("convolution", r"(?-i:(?<![A-Za-z])[Cc]|(?<=[a-z])C)onv(?:olution|olve)?(?-i:(?![a-z]))"
                    r"|wgrad|dgrad|fprop|implicit_gemm|winograd|im2col|col2im"),
    ("GEMM", r"(?<!fb)gemm|gemv|cublas|cutlass|^Cijk_|matmul|xmma|wgmma|nvjet|rocblas|hipblaslt|^triton_tem_|bmm"),
    ("reduction", r"reduce|reduction|softmax|batch_?norm|layer_?norm|group_?norm|rms_?norm|instance_?norm"
                  r"|welford|\bbn_(fw|bw)|cub::Device(Segmented)?Reduce|^triton_(red|per)_|argmax|argmin"),
    ("memory", r"copy|memcpy|memset|fillBuffer|nchwToNhwc|nhwcToNchw|transpose"),
    ("elementwise", r"elementwise|pointwise|^triton_poi_|multi_tensor_apply|vectorized|unrolled|functor|dropout"
                    r"|relu|gelu|silu|sigmoid|tanh|fill"),
))


def family_of(name: str, klass: str = "compute") -> str:
    """The family of one GPU kernel: its loader class first (communication, memory), then its name."""
    if klass == "comm":
        return "communication"
    if klass == "memory":
        return "memory"
    for family, pattern in FAMILY_RULES:
        if pattern.search(name):
            return family
    return "other"


def families(names: pd.Series, klasses: pd.Series) -> pd.Categorical:
    """`family_of` of every row (a categorical of FAMILIES), computed once per distinct (name, class)."""
    name_codes, name_values = codes_of(names)
    klass_codes, klass_values = codes_of(klasses)
    width = len(klass_values) + 1
    distinct, inverse = np.unique(name_codes * width + klass_codes, return_inverse=True)
    index = {family: i for i, family in enumerate(FAMILIES)}
    per_pair = np.array([index[family_of(str(name_values[p // width]), str(klass_values[p % width]))]
                         for p in distinct.tolist()], dtype=np.int64)
    codes = per_pair[inverse.reshape(-1)] if len(per_pair) else np.empty(0, dtype=np.int64)
    result: pd.Categorical = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(list(FAMILIES)))
    return result


TOP_ALL = 50
TOP_PER_RANK = 25
TOP_SELF = 15
_STAT_COLUMNS = ["count", "total_ns", "mean_ns", "p90_ns", "share_pct", "steps", "count_per_step", "ns_per_step"]
KERNEL_COLUMNS = ["name", "family", "launched_by", *_STAT_COLUMNS, "ranks"]
OP_COLUMNS = ["name", "kind", "count", "total_ns", "self_ns", "mean_ns", "p90_ns", "share_pct", "steps",
              "count_per_step", "ns_per_step", "ranks"]
FAMILY_COLUMNS = ["rank", "family", "count", "total_ns", "share_pct", "ns_per_step"]


def profiled_steps(store: Store) -> pd.Series:
    """Number of profiled steps per rank (all its windows), from the ProfilerStep markers."""
    prof = store.steps[store.steps["source"] == "profiler"]
    return prof.drop_duplicates(["rank", "window", "step"]).groupby("rank").size().astype(np.int64)


def kernel_work_view(analysis: Analysis) -> pd.DataFrame:
    """Every GPU work row (`gpu_work_view`) with its `family` and `launched_by` (the op of its launch, NaN unknown),
    both categorical. Each rank's work is joined to its own launches, a few ranks at a time (`per_rank.rank_chunks`)."""
    work = analysis.view(gpu_work_view)
    launches = launch_ops(analysis.view(cpu_calls_view))
    dtype = launches["launched_by"].dtype
    assert isinstance(dtype, pd.CategoricalDtype)  # launch_ops' promise
    by_code = np.full(len(work), -1, dtype=np.int64)
    launches_of = {as_int(rank): mine for rank, mine in launches.groupby("rank", sort=False, observed=True)}
    rows_of = {as_int(rank): rows for rank, rows in work.groupby("rank", sort=True, observed=True).indices.items()}
    keys = ["rank", "window", "correlation"]
    for ranks in rank_chunks({rank: len(rows) for rank, rows in rows_of.items()}):
        mine = [launches_of[rank] for rank in ranks if rank in launches_of]
        if not mine:
            continue
        rows = np.sort(np.concatenate([rows_of[rank] for rank in ranks]))
        joined = work[keys].iloc[rows].merge(pd.concat(mine) if len(mine) > 1 else mine[0], how="left", on=keys)
        by_code[rows] = joined["launched_by"].cat.codes.to_numpy(np.int64)
    by_code[work["correlation"].to_numpy() < 0] = -1  # NaN: unknown
    return work.assign(family=families(work["name"], work["klass"]),
                       launched_by=pd.Categorical.from_codes(by_code, dtype=dtype))


def group_stats(groups: Groups, frame: pd.DataFrame, steps_of: pd.Series) -> dict[str, object]:
    """count, total/mean/p90 of `dur_ns`, ranks, steps, and per-step count and time of each group of `frame`'s rows."""
    dur = frame["dur_ns"].to_numpy(np.int64)
    rank = frame["rank"].to_numpy(np.int64)
    in_step = frame["step"].to_numpy(np.int64) >= 0
    count = groups.count()
    total = groups.sum(dur)
    pair_group, pair_rank = groups.pairs(rank)
    steps = np.bincount(pair_group, weights=steps_of.reindex(pair_rank).fillna(0).to_numpy(np.float64),
                        minlength=groups.n)
    per = np.where(steps > 0, steps, np.nan)
    return {"count": count, "total_ns": total, "mean_ns": total / np.maximum(count, 1),
            "p90_ns": groups.quantile(dur, 0.9), "steps": steps.astype(np.int64),
            "count_per_step": groups.count(in_step) / per, "ns_per_step": groups.sum(dur, in_step) / per,
            "ranks": np.bincount(pair_group, minlength=groups.n).astype(np.int64)}


def _main_launcher(groups: Groups, codes: Ints, valid: np.ndarray, dur: Ints) -> Ints:
    """Per group, the launching op (code) whose launches account for most of its time (-1 when none is known)."""
    out = np.full(groups.n, -1, dtype=np.int64)
    if not valid.any():
        return out
    ids, values = groups.ids[valid], codes[valid]
    pairs = Groups.of(ids, values)
    weight = pairs.sum(dur[valid])
    group, value = ids[pairs.first], values[pairs.first]
    order = np.lexsort((value, -weight, group))
    _, first = np.unique(group[order], return_index=True)
    out[group[order][first]] = value[order][first]
    return out


def _grouped(analysis: Analysis, frame: pd.DataFrame, per_rank: bool, keys: tuple[str, ...],
             firsts: tuple[str, ...] = ()) -> tuple[Groups, pd.DataFrame]:
    """The groups of `frame`'s rows by the `keys` columns (and by rank when `per_rank`), and one row per group: its
    rank, the `keys` and `firsts` columns' values (of its first row) and its `group_stats`."""
    coded = {c: codes_of(frame[c]) for c in (*keys, *firsts)}
    rank = frame["rank"].to_numpy(np.int64)
    groups = Groups.of(*([rank] if per_rank else []), *(coded[c][0] for c in keys))
    first = groups.first
    values = {c: np.array(names, dtype=object)[codes[first]] for c, (codes, names) in coded.items()}
    return groups, pd.DataFrame({"rank": rank[first], **values,
                                 **group_stats(groups, frame, profiled_steps(analysis.store))})


def _share(table: pd.DataFrame, per_rank: bool, frame: pd.DataFrame, column: str, of: str = "total_ns") -> np.ndarray:
    """`table[of]` as a percentage of the sum of `frame[column]` of its rank (of all ranks unless `per_rank`)."""
    total = table[of].to_numpy()
    if not per_rank:
        base = float(frame[column].sum())
        return 100.0 * total / base if base > 0 else np.full(len(total), np.nan)
    base_of = frame.groupby("rank")[column].sum().reindex(table["rank"].to_numpy()).to_numpy(np.float64)
    return 100.0 * total / np.where(base_of > 0, base_of, np.nan)


def _top(table: pd.DataFrame, per_rank: bool, n: int, extra: str = "", n_extra: int = 0) -> pd.DataFrame:
    """The n rows of largest total_ns (of each rank), plus the n_extra of largest `extra`."""
    ordered = table.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    def head(frame: pd.DataFrame, k: int) -> pd.Index:
        return frame.groupby("rank", sort=False).head(k).index if per_rank else frame.head(k).index
    keep = head(ordered, n)
    if extra:
        keep = keep.union(head(table.sort_values([extra, "name"], ascending=[False, True], kind="stable"), n_extra))
    picked = ordered.loc[ordered.index.isin(keep)]
    if per_rank:
        picked = picked.sort_values("rank", kind="stable")
    return picked.reset_index(drop=True)


def _kernel_table(analysis: Analysis, per_rank: bool) -> pd.DataFrame:
    work = analysis.view(kernel_work_view)
    columns = (["rank"] if per_rank else []) + KERNEL_COLUMNS
    if work.empty:
        return pd.DataFrame(columns=columns)
    groups, table = _grouped(analysis, work, per_rank, ("name",), ("family",))
    launcher, launchers = codes_of(work["launched_by"])
    by = _main_launcher(groups, launcher, work["launched_by"].notna().to_numpy(), work["dur_ns"].to_numpy(np.int64))
    table["launched_by"] = np.where(by >= 0, np.array(launchers, dtype=object)[np.clip(by, 0, None)], "")
    table["share_pct"] = _share(table, per_rank, work, "dur_ns")
    return _top(table, per_rank, TOP_PER_RANK if per_rank else TOP_ALL)[columns]


def kernels_view(analysis: Analysis) -> pd.DataFrame:
    """The top GPU kernels across ranks (docs/internals/analyzers.md)."""
    return _kernel_table(analysis, per_rank=False)


def kernels_per_rank_view(analysis: Analysis) -> pd.DataFrame:
    """The top GPU kernels of each rank."""
    return _kernel_table(analysis, per_rank=True)


def kernel_families_view(analysis: Analysis) -> pd.DataFrame:
    """Per rank and kernel family: count, total, share of the rank's GPU work, time per step."""
    work = analysis.view(kernel_work_view)
    if work.empty:
        return pd.DataFrame(columns=FAMILY_COLUMNS)
    _, table = _grouped(analysis, work, True, ("family",))
    table["share_pct"] = _share(table, True, work, "dur_ns")
    return table.sort_values(["rank", "total_ns"], ascending=[True, False])[FAMILY_COLUMNS].reset_index(drop=True)


def _op_table(analysis: Analysis, per_rank: bool) -> pd.DataFrame:
    calls = analysis.view(cpu_calls_view)
    columns = (["rank"] if per_rank else []) + OP_COLUMNS
    if calls.empty:
        return pd.DataFrame(columns=columns)
    groups, table = _grouped(analysis, calls, per_rank, ("name", "kind"))
    table["self_ns"] = groups.sum(calls["self_ns"].to_numpy(np.int64))
    table["share_pct"] = _share(table, per_rank, calls, "self_ns", of="self_ns")
    return _top(table, per_rank, TOP_PER_RANK if per_rank else TOP_ALL, "self_ns", TOP_SELF)[columns]


def ops_view(analysis: Analysis) -> pd.DataFrame:
    """The top CPU ops across ranks (docs/internals/analyzers.md)."""
    return _op_table(analysis, per_rank=False)


def ops_per_rank_view(analysis: Analysis) -> pd.DataFrame:
    """The top CPU ops of each rank."""
    return _op_table(analysis, per_rank=True)
