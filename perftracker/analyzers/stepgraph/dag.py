"""Earliest finish over a dependency DAG: the one schedule engine of the step-graph replay, the per-op what-if and
the pipeline simulator.

`topological(preds)` orders the nodes after their predecessors (Kahn's algorithm) and names those left on a
cycle; `finish(groups, preds, dur, zero)` times them: a group's members start together at the latest end of their
predecessors and each ends after its own duration (floats, or one array per node to time many columns at once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import reduce
from typing import Any

import numpy as np


def topological(preds: Sequence[Iterable[int]]) -> tuple[list[int], list[int]]:
    """(the nodes in an order where each follows its predecessors, the nodes on or behind a cycle)."""
    succ: list[list[int]] = [[] for _ in preds]
    indeg = [0] * len(preds)
    for g, before in enumerate(preds):
        for h in before:
            succ[h].append(g)
            indeg[g] += 1
    queue = deque(g for g, k in enumerate(indeg) if k == 0)
    order: list[int] = []
    while queue:
        g = queue.popleft()
        order.append(g)
        for h in succ[g]:
            indeg[h] -= 1
            if indeg[h] == 0:
                queue.append(h)
    return order, [g for g, k in enumerate(indeg) if k > 0]


def finish(groups: Iterable[Sequence[int]], preds: Sequence[Sequence[int]], dur: Sequence[Any] | np.ndarray, zero: Any,
           hold: Callable[[int, Any], Any] | None = None) -> list[Any]:
    """Per node its end; `groups` in topological order, each group starting at the latest end of its members'
    predecessors (`zero` without any), moved by `hold(group, start)` when given."""
    end: list[Any] = [zero] * len(dur)
    for g, members in enumerate(groups):
        before = [end[j] for i in members for j in preds[i]]
        start = reduce(np.maximum, before) if before else zero
        start = hold(g, start) if hold is not None else start
        for i in members:
            end[i] = start + dur[i]
    return end
