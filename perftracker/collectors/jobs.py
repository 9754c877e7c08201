"""Which job each trace belongs to: the loaded traces grouped by job, before anything cross-rank.

Promise: `group_jobs` is a plain function of the traces' identities (`TraceJobFacts`): two traces are of
different jobs when they disagree on a fact a job fixes for all its ranks, or lie more than `FAR_APART_NS`
apart; a fact a trace lacks agrees with anything. The facts and why 24 hours: docs/internals/collectors.md.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perftracker.bounded import load_json_file
from perftracker.collectors.traces.trace_map import pg_groups
from perftracker.errors import InputError
from perftracker.rundir import MANIFEST, MAX_MANIFEST_BYTES

FAR_APART_NS = 24 * 3600 * 10**9
# Trace times this large are on the wall clock (epoch ns after 2001) even without a base time.
_EPOCH_NS = 10**18
_INTERNED: dict[tuple[tuple[str, str, int], ...], tuple[tuple[str, str, int], ...]] = {}  # see trace_job_facts
_VENDOR_WORDS = re.compile(r"^(?:nvidia|tesla|amd|intel|geforce|quadro)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class TraceJobFacts:
    """What one trace says about the job it belongs to ("" / -1 / None: it does not say)."""

    path: str
    rank: int | None
    world_size: int = -1
    device_name: str = ""
    process_groups: tuple[tuple[str, str, int], ...] = ()  # (pg_name, pg_desc, pg_size)
    manifest_job: str = ""
    run_id: str = ""
    wall_start_ns: int | None = None
    wall_end_ns: int | None = None


@dataclass
class JobGroup:
    """The traces of one job, with what they agree on."""

    members: list[TraceJobFacts] = field(default_factory=list)
    label: str = ""

    @property
    def paths(self) -> list[str]:
        return [m.path for m in self.members]

    @property
    def ranks(self) -> list[int]:
        return sorted({m.rank for m in self.members if m.rank is not None})

    def known_values(self, attr: str) -> list[Any]:
        """The values its members carry for `attr`, unknowns left out."""
        return sorted({getattr(m, attr) for m in self.members} - {"", -1})

    @property
    def world_size(self) -> int:
        return int(next(iter(self.known_values("world_size")), -1))

    @property
    def device_name(self) -> str:
        return str(next(iter(self.known_values("device_name")), ""))

    @property
    def job_id(self) -> str:
        return str(next(iter(self.known_values("run_id") or self.known_values("manifest_job")), ""))

    def span_ns(self) -> tuple[int, int] | None:
        starts = [m.wall_start_ns for m in self.members if m.wall_start_ns is not None]
        ends = [m.wall_end_ns for m in self.members if m.wall_end_ns is not None]
        return (min(starts), max(ends)) if starts and ends else None

    def describe(self) -> str:
        """One readable line: label, files, world size, devices, job id, times."""
        names = [Path(p).name for p in self.paths]
        files = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        parts = [f"{len(names)} file{'s' if len(names) != 1 else ''}: {files}",
                 f"world size {self.world_size if self.world_size > 0 else 'unknown'}",
                 f"ranks {_ranks_text(self.ranks)}", self.device_name or "no device properties"]
        if self.job_id:
            parts.append(f"job {self.job_id}")
        span = self.span_ns()
        parts.append(f"{_utc(span[0])} to {_utc(span[1])}" if span else "no wall-clock time")
        return f"{self.label} ({'; '.join(parts)})"


_FACTS = (("world_size", "world size"), ("device_name", "device"), ("manifest_job", "manifest job"),
          ("run_id", "TORCHELASTIC_RUN_ID"))


class _Agreed:
    """What the members of a group agree on so far: each fact's known value, each process group's (desc, size).
    Kept as members join, so that grouping N traces costs N checks, not N x members (4096 ranks of 500
    process groups each took hours)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.process_groups: dict[str, tuple[str, int]] = {}

    def add(self, trace: TraceJobFacts) -> None:
        for attr, _ in _FACTS:
            value = getattr(trace, attr)
            if value not in ("", -1):
                self.values.setdefault(attr, value)
        for name, desc, size in trace.process_groups:
            self.process_groups.setdefault(name, (desc, size))

    def conflict(self, trace: TraceJobFacts) -> str:
        """Why `trace` cannot be of the group's job ("" when it can)."""
        for attr, what in _FACTS:
            mine, theirs = getattr(trace, attr), self.values.get(attr)
            if mine not in ("", -1) and theirs is not None and mine != theirs:
                return f"{what} {theirs} vs {mine}"
        for name, desc, size in trace.process_groups:
            if name in self.process_groups and self.process_groups[name] != (desc, size):
                theirs_desc, theirs_size = self.process_groups[name]
                return f"process group {name} is {theirs_desc} of size {theirs_size} vs {desc} of size {size}"
        return ""


def group_jobs(traces: list[TraceJobFacts]) -> list[JobGroup]:
    """The traces grouped by job, labelled job1, job2, ... in order of time (then file name)."""
    groups: list[tuple[JobGroup, _Agreed]] = []
    # Traces that say most about their job seed the groups; the ones that say less then join them.
    for trace in sorted(traces, key=lambda t: (-_n_known(t), t.path)):
        home = next(((g, a) for g, a in groups if not a.conflict(trace)), None)
        if home is None:
            home = (JobGroup(), _Agreed())
            groups.append(home)
        home[0].members.append(trace)
        home[1].add(trace)
    split = [part for g, _ in groups for part in _split_far_apart(g)]
    split.sort(key=lambda g: ((g.span_ns() or (2**63,))[0], min(g.paths)))  # untimed groups last
    for index, group in enumerate(split, 1):
        group.members.sort(key=lambda m: m.path)
        group.label = _label(index, group)
    return split


def mixed_jobs_error(groups: list[JobGroup], where: str) -> InputError:
    """The refusal to analyze several jobs as one, naming the groups and how to split them."""
    listing = "; ".join(g.describe() for g in groups)
    reasons = _differences(groups)
    seen = Counter(rank for group in groups for rank in group.ranks)
    shared = sorted(r for r, n in seen.items() if n > 1)
    dup = (f"; rank{'s' if len(shared) > 1 else ''} {_ranks_text(shared)} appear{'' if len(shared) > 1 else 's'} "
           "in more than one of them: ranks of different jobs, not duplicates of one") if shared else ""
    return InputError(
        f"these traces come from {len(groups)} different jobs, which are never aligned or compared with each "
        f"other: {listing}; they differ in {reasons}{dup}", where,
        "analyze one with --job LABEL, each into OUT/<label>/ with --each-job, or move each job's traces "
        "into a folder of its own")


def pick_group(groups: list[JobGroup], wanted: str, where: str) -> JobGroup:
    """The group `--job` names: its label, or its jobN prefix."""
    for group in groups:
        if wanted in (group.label, group.label.split("-", 1)[0]):
            return group
    labels = ", ".join(g.label for g in groups)
    raise InputError(f"no job labelled {wanted!r} among these traces (jobs: {labels})", where,
                     "pass one of those labels to --job")


def trace_job_facts(path: Path, root: Path, rank: int | None, world_size: int, device_name: str,
                    pg_config: str, wall: tuple[int, int] | None) -> TraceJobFacts:
    """A trace's job identity from its parsed facts and the run directory around it. Its process groups are
    interned: the traces of one job list the same groups, held once however many ranks there are."""
    groups = tuple(sorted({(name, desc, size) for name, desc, size, _ in pg_groups(pg_config)}))
    groups = _INTERNED.setdefault(groups, groups)
    run_dir = path.parent.parent if path.parent.name == "traces" else path.parent
    return TraceJobFacts(
        path=str(path), rank=rank, world_size=world_size, device_name=device_name, process_groups=groups,
        manifest_job=_manifest_job(path.parent, root), run_id=_run_id(run_dir, rank),
        wall_start_ns=wall[0] if wall else None, wall_end_ns=wall[1] if wall else None)


def wall_window(base_ns: int, start_ns: int, end_ns: int) -> tuple[int, int] | None:
    """(start, end) on the wall clock, or None when the trace's times are on its own clock only."""
    if base_ns > 0:
        return base_ns + start_ns, base_ns + end_ns
    if start_ns >= _EPOCH_NS:
        return start_ns, end_ns
    return None


def _split_far_apart(group: JobGroup) -> list[JobGroup]:
    timed = sorted((m for m in group.members if m.wall_start_ns is not None),
                   key=lambda m: (m.wall_start_ns or 0, m.path))
    untimed = [m for m in group.members if m.wall_start_ns is None]
    parts: list[JobGroup] = []
    reach = 0
    for member in timed:
        start, end = member.wall_start_ns or 0, member.wall_end_ns or 0
        if not parts or start - reach > FAR_APART_NS:
            parts.append(JobGroup())
        parts[-1].members.append(member)
        reach = max(reach, end)
    if not parts:
        return [group]
    parts[0].members.extend(untimed)  # no time to place them by: they join the first run
    return parts


def _differences(groups: list[JobGroup]) -> str:
    said = []
    for what, values in (("world size", [g.world_size for g in groups if g.world_size > 0]),
                         ("device", [g.device_name for g in groups if g.device_name]),
                         ("job id", [g.job_id for g in groups if g.job_id])):
        if len(set(values)) > 1:
            said.append(f"{what} ({' vs '.join(str(v) for v in dict.fromkeys(values))})")
    spans = sorted(s for g in groups if (s := g.span_ns()) is not None)
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    if gaps and max(gaps) > FAR_APART_NS:
        said.append(f"time (up to {max(gaps) / 86_400e9:.1f} days apart)")
    if not said:
        said.append("process-group configuration")
    return ", ".join(said)


def _label(index: int, group: JobGroup) -> str:
    parts = [f"job{index}"]
    if group.world_size > 0:
        parts.append(f"w{group.world_size}")
    if group.device_name:
        parts.append(re.sub(r"[^a-z0-9]+", "-", _VENDOR_WORDS.sub("", group.device_name).lower()).strip("-"))
    return "-".join(p for p in parts if p)


def _n_known(trace: TraceJobFacts) -> int:
    return sum(1 for v in (trace.world_size, trace.device_name, trace.manifest_job, trace.run_id,
                           trace.process_groups) if v not in ("", -1, ()))


def _ranks_text(ranks: list[int]) -> str:
    if not ranks:
        return "unknown"
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _manifest_job(folder: Path, root: Path) -> str:
    """The `job` of the nearest manifest.json from `folder` up to `root` ("" when none says)."""
    root = root if root.is_dir() else root.parent
    for candidate in (folder, *folder.parents):
        data = _small_json(candidate / MANIFEST)
        if isinstance(data, dict) and data.get("job"):
            return str(data["job"])
        if candidate == root or candidate == candidate.parent:
            break
    return ""


def _small_json(path: Path) -> Any:
    """A manifest or env snapshot's JSON ({} when absent or unreadable)."""
    try:
        return load_json_file(path, MAX_MANIFEST_BYTES) if path.is_file() else {}
    except (InputError, OSError, ValueError):
        return {}


def _run_id(run_dir: Path, rank: int | None) -> str:
    """TORCHELASTIC_RUN_ID of the rank's env snapshot in `run_dir` ("" when none, or torchrun's `none`)."""
    if rank is None:
        return ""
    data = _small_json(run_dir / "env" / f"rank-{rank}.json")
    env = data.get("env") if isinstance(data, dict) else None
    value = str(env.get("TORCHELASTIC_RUN_ID", "")).strip() if isinstance(env, dict) else ""
    return "" if value in ("", "none") else value
