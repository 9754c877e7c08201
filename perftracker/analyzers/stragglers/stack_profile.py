"""The `stack_profile` analyzer: a straggler found from where each rank's main thread spends its time.

From `profile_samples` alone: a rank whose share of some frame exceeds the median rank's beyond sampling noise
and the other ranks' spread is named with that frame; `rank_profiles_view` is every sampled rank's profile,
`profile_ranks_view` / `profile_shares_view` the report's tables of them (empty without sampled stacks).
"""

from __future__ import annotations

import math
import re
import statistics
import sys

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import median_step_s
from perftracker.analyzers.findings import Cost, Finding, Severity
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.steps import StackProfileEvidence
from perftracker.store import Store

_FILE = re.compile(r"\((?P<file>[^()]+):\d+\)$")
_LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchdata", "numpy", "triton", "transformer_engine", "apex",
    "deepspeed", "transformers", "accelerate", "datasets", "lightning", "pytorch_lightning", "tqdm", "wandb",
    "tensorboard", "safetensors", "functorch", "perftracker", "pandas", "pyarrow", "PIL", "cv2",
})
MAX_FRAMES = 14
MAX_RANKS = 256
MIN_SHARE = 0.05  # a frame no rank spends 5% of its time in is not worth a row
MIN_SPREAD = 0.03  # nor one every rank spends the same share in
RANK_COLUMNS = ["rank", "samples", "rate_hz"]
# rank -> (frame shares, frame depths, samples)
Profiles = dict[int, tuple[dict[str, float], dict[str, int], int]]
SHARE_COLUMNS = ["row", "frame", "rank", "share_pct"]


def is_user_frame(frame: str) -> bool:
    """Is this py-spy frame ("function (file:line)") in the job's own code, not a library or the stdlib?"""
    m = _FILE.search(frame)
    if m is None:
        return False
    file = m.group("file")
    if file.startswith("<") or "site-packages/" in file or "dist-packages/" in file:
        return False
    top = file.split("/", 1)[0]
    module = top[:-3] if top.endswith(".py") else top
    return module not in _LIBRARIES and module not in sys.stdlib_module_names


def frame_shares(rows: pd.DataFrame) -> tuple[dict[str, float], dict[str, int], int]:
    """For one rank's main-thread rows of `profile_samples` (collapsed stacks, root first, with counts): (frame ->
    share of samples it appears in, frame -> its smallest depth, total samples). A frame recurring in one stack
    counts once."""
    counts: dict[str, int] = {}
    depth: dict[str, int] = {}
    total = 0
    for stack, count in zip(rows["stack"], rows["count"]):
        n = int(count)
        total += n
        seen: set[str] = set()
        for d, frame in enumerate(str(stack).split(";")):
            if not frame or frame in seen:
                continue
            seen.add(frame)
            counts[frame] = counts.get(frame, 0) + n
            depth[frame] = min(depth.get(frame, d), d)
    if total == 0:
        return {}, {}, 0
    return {f: c / total for f, c in counts.items()}, depth, total


def _family_p(share: float, median: float, samples: int, tests: int) -> float:
    """The chance that sampling noise alone shows some (rank, frame) pair this far above the median rank."""
    p = min(max(median, 1.0 / samples), 1.0 - 1.0 / samples)
    z = (share - median) / math.sqrt(p * (1.0 - p) / samples)
    if z < threshold("stack_profile.z"):
        return 1.0
    return min(1.0, 0.5 * math.erfc(z / math.sqrt(2.0)) * max(tests, 1))


def _others_spread(frame: str, rank: int, per_rank: Profiles) -> float:
    """How far apart the other ranks' shares of `frame` are: their range (the middle 80% from five ranks)."""
    others = sorted(s.get(frame, 0.0) for r, (s, _, _) in per_rank.items() if r != rank)
    if len(others) < 2:
        return 0.0
    if len(others) >= 5:
        cut = max(1, len(others) // 10)
        others = others[cut:-cut] or others
    return others[-1] - others[0]


def deepest(frames: dict[str, float], depth: dict[str, int], user_only: bool) -> str | None:
    """The deepest frame among those within NEAR_MAX of the largest value."""
    if not frames:
        return None
    top = max(frames.values())
    cut = threshold("stack_profile.near_max") * top
    near = [f for f, v in frames.items() if v >= cut and (is_user_frame(f) or not user_only)]
    return max(near, key=lambda f: (depth.get(f, 0), frames[f])) if near else None


def rank_profiles(store: Store, min_samples: int | None = None) -> Profiles:
    """rank -> (frame shares, frame depths, samples) of the ranks with at least `min_samples` main-thread samples
    (the run's `stack_profile.min_samples` unless given)."""
    if min_samples is None:
        min_samples = threshold_int("stack_profile.min_samples")
    samples = store["profile_samples"]
    main = samples[samples["main"].astype(bool)]
    out: Profiles = {}
    for rank, rows in main.groupby("rank"):
        shares, depth, total = frame_shares(rows)
        if total >= max(1, min_samples):
            out[int(str(rank))] = (shares, depth, total)
    return out


def rank_profiles_view(analysis: Analysis) -> Profiles:
    """`rank_profiles` of every rank with at least one main-thread sample."""
    return rank_profiles(analysis.store, min_samples=1)


def _with_enough_samples(analysis: Analysis) -> Profiles:
    least = threshold_int("stack_profile.min_samples")
    return {r: p for r, p in analysis.view(rank_profiles_view).items() if p[2] >= least}


def judgeable(analysis: Analysis) -> bool:
    """Enough ranks with enough samples to compare them with a median rank."""
    return len(_with_enough_samples(analysis)) >= threshold_int("stack_profile.min_ranks")


def analyze_stack_profile(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    if store["profile_samples"].empty:
        return []
    per_rank = _with_enough_samples(analysis)
    if len(per_rank) < threshold_int("stack_profile.min_ranks"):
        return []
    frames = sorted({f for shares, _, _ in per_rank.values() for f in shares})
    median = {f: statistics.median(s.get(f, 0.0) for s, _, _ in per_rank.values()) for f in frames}
    tests = len(frames) * len(per_rank)
    flagged: dict[int, dict[str, float]] = {}
    family_p: dict[int, float] = {}
    for rank, (shares, _, total) in per_rank.items():
        excess: dict[str, float] = {}
        for f, share in shares.items():
            gap = share - median[f]
            if gap < threshold("stack_profile.excess") or share < threshold("stack_profile.ratio") * median[f] or gap < threshold("straggler.min_effect_over_spread") * _others_spread(f, rank, per_rank):
                continue
            p = _family_p(share, median[f], total, tests)
            if p <= threshold("straggler.alpha"):
                excess[f] = gap
                family_p[rank] = min(family_p.get(rank, 1.0), p)
        if excess:
            flagged[rank] = excess
    if not flagged or len(flagged) * 2 >= len(per_rank):
        return []
    step_s = median_step_s(store.steps)
    return [_finding(rank, excess, per_rank, median, step_s, store, 1.0 - family_p[rank])
            for rank, excess in sorted(flagged.items())]


def _finding(rank: int, excess: dict[str, float], per_rank: Profiles, median: dict[str, float], step_s: float,
             store: Store, confidence: float) -> Finding:
    shares, depth, total = per_rank[rank]
    where = deepest(excess, depth, user_only=True) or deepest(excess, depth, user_only=False) or ""
    leaf = deepest(excess, depth, user_only=False) or where
    half = threshold("stack_profile.excess") / 2
    deficit = {f: m - shares.get(f, 0.0) for f, m in median.items() if m - shares.get(f, 0.0) >= half}
    least_depth = {f: min(d[f] for _, d, _ in per_rank.values() if f in d) for f in deficit}
    instead = deepest(deficit, least_depth, user_only=False)
    gap = excess[where]
    title = (f"Rank {rank} spends {100 * shares[where]:.0f}% of its time in {where}, the median rank "
             f"{100 * median[where]:.0f}%")
    if instead:
        title += (f"; the other ranks spend that time in {instead} ({100 * median[instead]:.0f}% against "
                  f"{100 * shares.get(instead, 0.0):.0f}% on rank {rank})")
    rec = (f"Rank {rank} holds the job back: in synchronous training the others wait for it"
           + (f" (their extra time in {instead} is that wait)" if instead else "")
           + f". Look at what rank {rank} does in {where}: rank-dependent work (logging, evaluation, "
           "checkpointing on one rank), a slower data loader or input shard, a CPU shared with other processes "
           "(check its affinity and the host's load), or a slower device. Confirm with a trace: `perftracker attach "
           "--trace-steps N` on a job launched with KINETO_USE_DAEMON=1 or the perftracker hook.")
    evidence: StackProfileEvidence = {
        "rank": rank, "frame": where, "deepest_frame": leaf, "share": round(shares[where], 4),
        "median_share": round(median[where], 4), "excess": round(gap, 4), "samples": total,
        "others_instead": instead, "per_rank_share": {str(r): round(s.get(where, 0.0), 4) for r, (s, _, _) in sorted(per_rank.items())},
        "top_excess_frames": [{"frame": f, "excess": round(v, 4)} for f, v in
                              sorted(excess.items(), key=lambda kv: (-kv[1], -depth.get(kv[0], 0)))[:8]],
        "method": "py-spy record of every rank's main thread (non-blocking); shares of samples per frame "
                  "compared with the median rank",
        "significance": {"confidence": round(confidence, 4), "alpha": threshold("straggler.alpha"),
                         "others_spread": round(_others_spread(where, rank, per_rank), 4)},
    }
    seconds = gap * step_s
    cost = Cost(seconds_per_step=seconds, share_of_step=gap if step_s else 0.0) if step_s else Cost()
    hosts = tuple(sorted({str(h) for h in store["profile_samples"].loc[
        store["profile_samples"]["rank"] == rank, "host"].dropna() if str(h)}))
    return Finding("stack_profile", Severity.WARNING, title, rec, evidence, ranks=(rank,), hosts=hosts, cost=cost,
                   confidence=confidence, key=f"stack_profile:{rank}:{where}")



def _profiles(analysis: Analysis) -> Profiles:
    return dict(sorted(analysis.view(rank_profiles_view).items())[:MAX_RANKS])


def profile_ranks_view(analysis: Analysis) -> pd.DataFrame:
    """rank, samples (main-thread samples), rate_hz of each profiled rank."""
    per_rank = _profiles(analysis)
    if not per_rank:
        return pd.DataFrame(columns=RANK_COLUMNS)
    samples = analysis.store["profile_samples"]
    rate = samples.groupby("rank")["rate_hz"].max()
    return pd.DataFrame({"rank": list(per_rank), "samples": [p[2] for p in per_rank.values()],
                         "rate_hz": [float(rate.get(r, float("nan"))) for r in per_rank]})


def profile_shares_view(analysis: Analysis) -> pd.DataFrame:
    """The frames that differ most between ranks, with each rank's share of samples in them (%)."""
    per_rank = _profiles(analysis)
    ranks = sorted(per_rank)
    frames = {f for shares, _, _ in per_rank.values() for f in shares}
    spread = {f: max(per_rank[r][0].get(f, 0.0) for r in ranks) - min(per_rank[r][0].get(f, 0.0) for r in ranks)
              for f in frames if max(per_rank[r][0].get(f, 0.0) for r in ranks) >= MIN_SHARE}
    spread = {f: v for f, v in spread.items() if v >= MIN_SPREAD}
    depth = {f: min(per_rank[r][1].get(f, 10**6) for r in ranks) for f in spread}
    rows = sorted(sorted(spread, key=lambda f: (-spread[f], f))[:MAX_FRAMES], key=lambda f: (depth[f], f))
    records = [(i, f, r, round(100 * per_rank[r][0].get(f, 0.0), 1)) for i, f in enumerate(rows) for r in ranks]
    return pd.DataFrame(records, columns=SHARE_COLUMNS)
