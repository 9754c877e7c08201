"""The `hang` analyzer: which ranks hold a hung job up, and where the others wait for them.

Reads only the Store's `stacks` table (the py-spy snapshots `attach` took).
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import ranks_text, who
from perftracker.analyzers.failures.stack_state import (
    RankState,
    signature,
    states_from_table,
    still,
    switches_of,
)
from perftracker.analyzers.findings import Finding, Severity
from perftracker.evidence.failures import HangEvidence, HangGroup
from perftracker.store.stack_frames import main_stacks


def groups_of(states: dict[int, RankState]) -> list[HangGroup]:
    """Ranks grouped by (collective, innermost user frame), largest group first."""
    by: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r, s in states.items():
        by[(s.collective, s.where)].append(r)
    return [{"ranks": sorted(ranks), "collective": collective, "where": where, "site": (first := states[min(ranks)]).site,
             "idle": first.idle, "host": first.host, "frames": list(first.frames[:12])}
            for (collective, where), ranks in sorted(by.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))]


def _moved_on(states: dict[str, dict[int, RankState]], times: dict[str, int], names: list[str], hang: str,
              switches: dict[str, dict[int, int | None]]) -> bool:
    """True when a later snapshot shows a rank elsewhere, or the ranks that should be blocked woke up: moved on."""
    for later in names:
        if later.endswith("-hang") or times.get(later, 0) <= times.get(hang, 0):
            continue
        common = states[later].keys() & states[hang].keys()
        if any((states[later][r].waiting, states[later][r].where) != (states[hang][r].waiting, states[hang][r].where)
               for r in common) or not still(states[later], switches.get(hang, {}), switches.get(later, {}),
                                             (times[later] - times[hang]) / 1e9):
            return True
    return False


def _snapshots(stacks: pd.DataFrame) -> tuple[dict[str, dict[int, RankState]], dict[str, int], list[str]]:
    """snapshot -> rank -> state, snapshot -> its first ts_ns, and the snapshots in time order."""
    states = states_from_table(stacks)
    times = {str(k): int(v) for k, v in stacks.groupby("snapshot")["ts_ns"].min().items()}
    return states, times, sorted(states, key=lambda n: (times.get(n, 0), n))


def _choose(stacks: pd.DataFrame, last_step_ns: int) -> tuple[str, str, dict[int, RankState], str, int] | None:
    """(kind, snapshot label, states, how it was chosen, ts_ns) of the snapshot to judge; two alike
    periodic snapshots count only when no step ended after the first (`last_step_ns`, epoch ns)."""
    states, times, names = _snapshots(stacks)
    if not states:
        return None
    hosts = {str(k): str(v) for k, v in stacks.groupby("snapshot")["host"].first().items()}
    switches = {name: switches_of(look) for name, look in main_stacks(stacks).items()}
    hang = [n for n in names if n.endswith("-hang") and not _moved_on(states, times, names, n, switches)]
    if hang:
        latest = {str(hosts.get(n, "")): n for n in hang}  # latest per host; hosts' dumps merged
        merged: dict[int, RankState] = {}
        for n in sorted(latest.values(), key=lambda n: times.get(n, 0)):
            merged.update(states[n])
        label = ", ".join(sorted(latest.values()))
        return "hang", label, merged, "hang dump (taken when the job stopped making progress)", \
            int(max(times[n] for n in latest.values()))
    last = names[-1]
    if last.endswith(("-at", "-request")):
        return "single", last, states[last], "one explicit snapshot", int(times[last])
    periodic = [n for n in names if not n.endswith(("-at", "-request"))]
    if len(periodic) >= 2 and last_step_ns < times[periodic[-2]]:
        first, second = periodic[-2], periodic[-1]
        a, b = states[first], states[second]
        same = signature(a) == signature(b)  # the live sampler's notion of "the same picture"
        if same and not still(b, switches.get(first, {}), switches.get(second, {}), (times[second] - times[first]) / 1e9):
            same = False  # the same stacks twice, but the ranks kept waking up: a loop, not a hang
        if same:
            how = f"the same in the last two snapshots ({periodic[-2]}, {periodic[-1]})"
            return "repeated", periodic[-1], b, how, int(times[periodic[-1]])
    return None


def chosen_states(stacks: pd.DataFrame) -> dict[int, RankState]:
    """Where each rank is in the snapshot `diagnose` would judge, else in the latest snapshot of each rank."""
    chosen = _choose(stacks, -1)
    if chosen is not None:
        return chosen[2]
    latest: dict[int, RankState] = {}
    states, _, names = _snapshots(stacks)
    for name in names:
        latest.update(states[name])
    return latest


def diagnose(stacks: pd.DataFrame, last_step_ns: int = -1) -> list[Finding]:
    chosen = _choose(stacks, last_step_ns)
    if chosen is None:
        return []
    kind, label, states, how, ts_ns = chosen
    groups = groups_of(states)
    waiting = [r for r, s in states.items() if s.waiting]
    suspects = sorted(r for r, s in states.items() if not s.waiting)
    world = int(stacks["world_size"].max()) if len(stacks) else -1
    missing = sorted(set(range(world)) - set(states)) if world > 0 else []
    evidence = HangEvidence(
        snapshot=label, chosen_because=how, snapshot_time=pd.Timestamp(ts_ns, unit="ns", tz="UTC").isoformat(),
        groups=groups, waiting_ranks=sorted(waiting), suspect_ranks=suspects, missing_ranks=missing[:64],
        world_size=world)
    severity = Severity.WARNING if kind == "single" else Severity.CRITICAL
    main_wait = next((g for g in groups if g["collective"]), None)
    if main_wait is not None and suspects:
        where_s = "; ".join(f"rank {r} at {states[r].where}" for r in suspects[:6])
        if len({states[r].where for r in suspects}) == 1:
            verb = "it is" if len(suspects) == 1 else "they are"
            where_s = f"{verb} at {states[suspects[0]].where}"
        title = (f"{who(suspects, None)} {'is' if len(suspects) == 1 else 'are'} not in the collective "
                 f"{main_wait['collective']} ({main_wait['site']}) where {who(waiting, None).lower()} wait; {where_s}")
        rec = (f"The job waits for {who(suspects, None).lower()}: look at what {'it does' if len(suspects) == 1 else 'they do'}"
               f" at {states[suspects[0]].where} (full stacks in the evidence and in stacks/{label.split(', ')[0]}/). "
               "Typical causes: a rank-dependent branch that skips or reorders a collective, a stuck data loader or "
               "file system, a deadlock, or an exception swallowed on that rank. dist.monitored_barrier() names a "
               "missing rank from inside the job; TORCH_DISTRIBUTED_DEBUG=DETAIL checks collective order.")
        hosts = tuple(sorted({states[r].host for r in suspects if states[r].host}))
        return [Finding("hang", severity, title, rec, evidence, ranks=tuple(suspects), hosts=hosts,
                        key=f"hang:{label}:{suspects}")]
    if main_wait is not None:  # every rank with stacks waits in a collective
        places = sorted({(s.collective, s.where) for s in states.values()})
        if len(places) == 1:
            title = (f"Every rank with stacks ({ranks_text(list(states), None)}) waits in the collective "
                     f"{main_wait['collective']} ({main_wait['site']})")
            if missing:
                title += f"; ranks {ranks_text(missing)} have no stacks"
            rec = ("No attached rank is holding the others up: the rank that never arrives is "
                   + (f"among ranks {ranks_text(missing[:16])}, on node(s) not attached. " if missing else
                      "on another node, or the ranks disagree on the process group or collective order. ")
                   + "Attach on every node with the same --stacks-at time to see all ranks in one snapshot.")
        else:
            title = "Ranks wait in different collectives: " + "; ".join(
                f"{who(g['ranks'], None).lower()} in {g['collective']} ({g['site']})" for g in groups)
            rec = ("The ranks disagree on which collective comes next (a rank-dependent branch or a different "
                   "process group order): make every rank issue the same collectives in the same order. "
                   "TORCH_DISTRIBUTED_DEBUG=DETAIL reports mismatched collectives.")
        return [Finding("hang", severity, title, rec, evidence, ranks=tuple(sorted(states)), key=f"hang:{label}:all")]
    if all(s.where in ("", "?") for s in states.values()):
        return []  # no Python frames to judge (the ranks were exiting or not Python)
    if kind == "hang" or len({s.where for s in states.values()}) == 1 and all(s.idle for s in states.values()):
        spots = "; ".join(f"{who(g['ranks'], None).lower()} at {g['where']}" for g in groups[:6])
        title = f"The job stopped making progress but no rank waits in a collective: {spots}"
        rec = ("The ranks are stuck outside communication (data loading, I/O, a lock, a sleep): see the frames "
               "in the evidence.")
        return [Finding("hang", Severity.WARNING, title, rec, evidence, ranks=tuple(sorted(states)),
                        key=f"hang:{label}:nocoll")]
    return []


def analyze_hang(analysis: Analysis) -> list[Finding]:
    """Hung jobs from stack snapshots: who is missing from which collective, and where."""
    store = analysis.store
    stacks = store["stacks"]
    if stacks.empty:
        return []
    if store.run_info.manifest.get("exit_code") == 0:
        return []  # the job finished normally (perftracker run): a late stall was its shutdown
    steps = store.steps
    wall = steps[steps["source"] == "stepfile"] if "source" in steps else steps.iloc[0:0]
    last_step_ns = int((wall["start_ns"] + wall["dur_ns"]).max()) if len(wall) else -1
    return diagnose(stacks, last_step_ns)
