"""How much of a rank's time each frame takes, from its sampled stacks (the `profile_samples` table).

Promise: `frame_shares(rows)` turns one rank's main-thread rows of `profile_samples` (collapsed
stacks, root first, with sample counts) into the share of samples each frame appears in (its
inclusive share of the rank's time), each frame's smallest depth, and the total sample count. The
`stack_profile` analyzer compares these shares across ranks.
"""

from __future__ import annotations

import pandas as pd


def frame_shares(rows: pd.DataFrame) -> tuple[dict[str, float], dict[str, int], int]:
    """For one rank's main-thread rows: (frame -> share of samples it appears in, frame -> its smallest
    depth, total samples). A frame recurring in one stack counts once."""
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
