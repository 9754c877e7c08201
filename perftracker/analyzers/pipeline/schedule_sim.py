"""Pipeline schedules: their pass order, their ideal bubble, a small simulator, and recognizing one from a trace.

`pass_order` (GPipe, 1F1B), `simulate` (the makespan of a schedule with per-stage pass times), `ideal_bubble`
((p - 1) / (m + p - 1)) and `recognize` (the schedule a stage's pass letters show).
"""

from __future__ import annotations

from collections.abc import Sequence

from perftracker.analyzers.stepgraph.dag import finish, topological


def pass_order(kind: str, stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """The order of (pass "F" | "B", micro-batch) of one stage."""
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(stages - stage - 1, m)
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def ideal_bubble(stages: int, m: int) -> float:
    """The idle share of a GPipe / 1F1B step with equal stages: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (m + stages - 1) if m > 0 and stages > 0 else 0.0


def simulate(kind: str, fwd: Sequence[float], bwd: Sequence[float], m: int) -> float:
    """The makespan of `m` micro-batches through stages with these pass times (docs/internals/stepgraph.md): each
    pass after its stage's previous one, a forward after the stage before's, a backward after the stage after's."""
    p = len(fwd)
    passes = [(k, s, i) for s in range(p) for k, i in pass_order(kind, s, p, m)]
    index = {key: n for n, key in enumerate(passes)}
    preds = []
    for n, (k, s, i) in enumerate(passes):
        if k == "F":
            deps = [("F", s - 1, i)] if s > 0 else []
        else:
            deps = [("F", s, i), *([("B", s + 1, i)] if s + 1 < p else [])]
        preds.append(([n - 1] if n and passes[n - 1][1] == s else []) + [index[d] for d in deps])
    order, stuck = topological(preds)
    if stuck:  # cannot happen for these schedules
        raise ValueError(f"schedule {kind} deadlocks with {p} stages and {m} micro-batches")
    end = finish([(n,) for n in order], preds, [fwd[s] if k == "F" else bwd[s] for k, s, _ in passes], 0.0)
    return float(max(end, default=0.0))


def recognize(passes: str, stage: int, stages: int) -> str:
    """'gpipe', '1f1b', 'interleaved' or 'unknown' from one stage's pass letters in one step."""
    m = passes.count("F")
    if not passes or m != passes.count("B") or m == 0:
        return "unknown"
    if passes == "F" * m + "B" * m and m > max(1, stages - stage - 1):
        return "gpipe"
    if passes == "".join(k for k, _ in pass_order("1f1b", stage, stages, m)):
        return "1f1b"
    warm = len(passes) - len(passes.lstrip("F"))
    if warm > stages - stage - 1 and passes != "F" * m + "B" * m:
        return "interleaved"
    return "gpipe" if passes == "F" * m + "B" * m else "unknown"
