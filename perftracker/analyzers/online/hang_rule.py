"""The watcher's hang rule: no step for K times the typical step (and at least a floor), per job.

`hang_alarm(...)` returns an `Alarm` (kind "hang") when the step-stall rule `step_stall` says the job stopped
making progress, else None.
"""

from __future__ import annotations

from collections.abc import Mapping

from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.store.alarms import Alarm


def step_stall(quiet_ns: int | None, median_step_ns: int | None, steps_known: int) -> str | None:
    """None when the steps known are too few to judge, "" when they keep coming, else why it is a stall."""
    if median_step_ns is None or quiet_ns is None or steps_known < threshold_int("online.hang.min_steps"):
        return None
    if quiet_ns <= max(threshold("online.hang.stall_factor") * median_step_ns,
                       threshold("online.hang.min_stall_s") * 1e9):
        return ""
    factor = threshold("online.hang.stall_factor")
    return (f"no step for {quiet_ns / 1e9:.0f} s ({factor:g}x the median step time is "
            f"{factor * median_step_ns / 1e9:.1f} s)")


def hang_alarm(last_step: Mapping[int, int], last_step_ns: Mapping[int, int], median_step_ns: int | None,
               steps_known: int, now_ns: int) -> Alarm | None:
    if not last_step_ns:
        return None
    newest = max(last_step_ns.values())
    verdict = step_stall(now_ns - newest, median_step_ns, steps_known)
    if not verdict:
        return None
    oldest = min(last_step_ns.values())
    quiet = tuple(sorted(r for r, ns in last_step_ns.items() if ns <= oldest + 1_000_000_000))
    step = max(last_step.values()) if last_step else -1
    return Alarm("hang", f"{verdict}; last step {step}", ranks=quiet, step=step)
