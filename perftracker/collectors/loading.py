"""Load everything under a path into a Store: map over rank files on an engine, then reduce.

Promise: `load_path` (one Store; traces of several jobs refused unless one is picked) and `load_jobs` (one Store
per job) read every input kind; unusable files become notes naming the file, and the analysis runs on what is
usable. The manifest's numbers are range-checked (`checked_manifest`) and its made-up inputs listed
(`synthetic_inputs`). Map, cache and reduce: docs/internals/collectors.md.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perftracker import option_checks as checks
from perftracker.collectors.engines import MapArgs, checked_engine_name, engine_for
from perftracker.collectors.input_kinds import KINDS, KINETO, NSYS, OTHER, Classified, classify, usable_tables
from perftracker.collectors.jobs import (
    JobGroup,
    group_jobs,
    mixed_jobs_error,
    pick_group,
    trace_job_facts,
    wall_window,
)
from perftracker.collectors.nsys.load import read_nsys_inputs
from perftracker.collectors.traces.comm_kernels import CommKernels, cached_comm_kernels
from perftracker.collectors.traces.kineto_columns import release_free_memory
from perftracker.collectors.traces.ranks import TraceIdentity, assign_windows
from perftracker.collectors.traces.trace_map import (
    FileResult,
    expand_ranks,
    pg_groups,
    pg_sources,
    result_tables,
)
from perftracker.errors import InputError
from perftracker.rundir import MANIFEST, Inputs, discover
from perftracker.store import LoadNote, Store, SyntheticInput
from perftracker.store.event_parts import EventParts
from perftracker.store.run_info import ProcessGroup
from perftracker.store.schema import conform
from perftracker.values import MAX_RANK, int_in


@dataclass(frozen=True)
class LoadOptions:
    comm_kernel_patterns: tuple[str, ...] = ()  # --comm-kernel regexes (family "custom")
    comm_kernel_files: tuple[Path, ...] = ()  # --comm-kernels files (collectors.traces.comm_kernels format)
    cache_dir: Path | None = None  # None: no cache
    workers: int = 0  # 0: one per CPU, at most one per file (with the Ray engine: the CPUs of a Ray it starts)
    engine: str = "local"  # the map step's engine: local (a process pool) or ray (collectors.engines)
    ray_address: str = ""  # the Ray cluster to join ("": start one on this machine for the command)
    nccl_profile: str | None = None  # platform profile name or file for the NCCL rules
    sysfs_root: Path | None = None  # this node's /sys (or a copy) for the NCCL/RDMA rules
    sysfs_host: str = ""  # the name of the node whose sysfs that is (the command computes it once)
    nsys_step_range: str = ""  # the NVTX range name that marks a step in Nsight Systems exports (collectors/nsys)
    follow_links: bool = False  # read files that symlinks lead to outside the input folder (containment.py)
    job: str | None = None  # the label of the one job to load where the traces are of several (collectors.jobs)
    # from this many events on, the Store's events are Parquet parts on disk, one per trace, not one table in
    # memory (store/event_parts.py; a temporary folder the Store removes, with or without a cache); 0: always
    spill_events_from: int = 1 << 18
    # called with (files parsed, files in all) as the map step goes (the CLI's progress display on a TTY)
    progress: Callable[[int, int], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Each value checked as it is given (`perftracker.option_checks`), before anything is loaded."""
        set_ = object.__setattr__
        set_(self, "comm_kernel_patterns", checks.patterns(self.comm_kernel_patterns))
        set_(self, "comm_kernel_files", checks.paths(self.comm_kernel_files, "comm_kernel_files"))
        set_(self, "cache_dir", checks.optional_path(self.cache_dir, "cache"))
        checks.whole(self.workers, "workers")
        checked_engine_name(checks.text(self.engine, "engine"))
        checks.text(self.ray_address, "ray_address")
        checks.optional_text(self.nccl_profile, "nccl_profile")
        set_(self, "sysfs_root", checks.optional_path(self.sysfs_root, "sysfs_root"))
        checks.text(self.sysfs_host, "sysfs_host")
        checks.text(self.nsys_step_range, "nsys_step_range")
        checks.boolean(self.follow_links, "follow_links")
        checks.optional_text(self.job, "job")
        checks.whole(self.spill_events_from, "spill_events_from")
        checks.optional_callable(self.progress, "progress", "a function of (files parsed, files in all), or None")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perftracker"


def comm_kernels_of(options: LoadOptions) -> CommKernels:
    """The communication kernel matcher of these options (InputError / UsageError for a bad file or regex)."""
    return cached_comm_kernels(options.comm_kernel_files, options.comm_kernel_patterns)


@dataclass
class _Scan:
    """Everything found under a path, traces parsed and grouped by job, before any Store is built."""

    root: Path
    options: LoadOptions
    inputs: Inputs
    found: Classified  # the files of each input kind (collectors/input_kinds.py)
    results: list[FileResult]
    groups: list[JobGroup]


def load_path(root: Path, options: LoadOptions) -> Store:
    """Build the Store for everything under `root` (run directory, folder of traces, or one file).

    Traces of several jobs are refused (InputError naming the groups) unless `options.job` picks one.
    """
    scan = _scan(root, options)
    if len(scan.groups) > 1 and not options.job:
        raise mixed_jobs_error(scan.groups, str(root))
    group = pick_group(scan.groups, options.job, str(root)) if options.job else None
    return _build(scan, group)


def load_jobs(root: Path, options: LoadOptions) -> Iterator[tuple[JobGroup | None, Store]]:
    """One Store per job found under `root` (built one at a time); the group is None for inputs without
    traces. With one job this is `load_path`'s Store."""
    scan = _scan(root, options)
    if len(scan.groups) <= 1:
        yield (scan.groups[0] if scan.groups else None), _build(scan, None)
        return
    for group in scan.groups:
        yield group, _build(scan, group)


def _scan(root: Path, options: LoadOptions) -> _Scan:
    if not root.exists():
        raise InputError("no such file or directory", str(root), "check the path")
    comm_kernels = comm_kernels_of(options)  # a bad --comm-kernels file or --comm-kernel regex stops here
    inputs = discover(root, options.follow_links)
    if inputs.unreadable and inputs.unreadable[0][0] == root:
        raise InputError(f"is {inputs.unreadable[0][1]}, not a regular file or a folder", str(root),
                         "point perftracker at a run directory, a folder of inputs or one input file")
    if inputs.empty:
        raise InputError(
            "found no PyTorch profiler traces (*.json, *.json.gz), step files (steps/rank-N.jsonl) or NCCL logs",
            str(root), "point analyze at a run directory, a folder of torch.profiler traces or of NCCL logs")
    found = classify(inputs)
    engine = engine_for(options.engine, options.workers, options.ray_address)  # the map over the traces
    args = MapArgs(options.cache_dir, options.comm_kernel_files, options.comm_kernel_patterns)
    results = [*engine.map([str(p) for p in found.of(KINETO)], args, options.progress or (lambda done, total: None)),
               *read_nsys_inputs(found.of(NSYS), comm_kernels, options.nsys_step_range)]
    facts = [trace_job_facts(Path(r.path), root, t.rank, t.world_size, t.device_name, t.pg_config,
                             wall_window(t.base_ns, t.start_ns, t.end_ns))
             for r in results if r.ok and (t := r.facts) is not None]
    return _Scan(root, options, inputs, found, results, group_jobs(facts))


def _build(scan: _Scan, group: JobGroup | None) -> Store:
    """The Store of one job: all inputs where the traces are of one job, else `group`'s traces alone
    (the other inputs cannot be told apart by job and are left out, with a note)."""
    store = Store()
    try:
        _fill(store, scan, group)
    except BaseException:
        store.close()  # events already written to disk go with the failed load
        raise
    return store


def _fill(store: Store, scan: _Scan, group: JobGroup | None) -> None:
    root, inputs = scan.root, scan.inputs
    store.run_info.input = str(root)
    store.run_info.manifest, manifest_notes = checked_manifest(inputs.manifest or {})
    store.add_notes(manifest_notes)
    store.add_notes(LoadNote("warning", str(path), why) for path, why in inputs.skip_notes())
    store.run_info.synthetic_inputs, synthetic_notes = synthetic_inputs(store.run_info.manifest)
    store.add_notes(synthetic_notes)
    several = len(scan.groups) > 1
    if several and group is not None:
        chosen = set(group.paths)
        _reduce_traces(store, [r for r in scan.results if r.path in chosen or not r.ok], scan.options.spill_events_from)
        _note_other_jobs(store, scan, group)
    else:
        _reduce_traces(store, scan.results, scan.options.spill_events_from)
    # the map's results and the per-rank frames are gone: hand their heap pages back, else the driver's RSS stays
    # as high as the results and the events table together for the rest of the analysis
    release_free_memory()
    family = store.event_columns(["comm_family"])["comm_family"]  # its distinct values as text, not every row's
    families = set(pd.Series(family.unique()).astype(str)) - {""} if store.n_events else set()
    store.run_info.comm_libraries = comm_kernels_of(scan.options).describe(families)
    if not several:
        for kind in KINDS:  # every kind but the traces mapped above, in the list's order
            if kind.load is not None:
                kind.load(store, scan.found.of(OTHER if kind.claims is None else kind.name), scan.options)
    _groups_from_flight_recorder(store)
    if not any(store.n_events if name == "events" else not store[name].empty for name in usable_tables()):
        errors = "; ".join(n.message for n in store.notes if n.level == "error")
        raise InputError(f"none of the inputs could be used{f' ({errors})' if errors else ''}", str(root),
                         "check that these are torch.profiler traces, step files or NCCL logs")


def _groups_from_flight_recorder(store: Store) -> None:
    """The groups the flight-recorder dumps declare (pg_config), into the one group table where no trace named them."""
    groups = store.run_info.process_groups
    for name, entry in list(store.run_info.fr_pg_config.items())[:4096]:
        if str(name) in groups or not isinstance(entry, dict):
            continue
        raw = entry.get("ranks")
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                raw = None
        ranks = tuple(r for r in raw if isinstance(r, int) and not isinstance(r, bool)) if isinstance(raw, list) else ()
        groups[str(name)] = ProcessGroup(str(name), str(entry.get("desc", ""))[:200], len(ranks) if ranks else -1,
                                         ranks, "flight_recorder")


def _note_other_jobs(store: Store, scan: _Scan, group: JobGroup) -> None:
    others = [g.describe() for g in scan.groups if g is not group]
    store.notes.append(LoadNote("warning", "jobs", f"these inputs hold {len(scan.groups)} jobs; this analysis is "
                                f"{group.label} alone, not compared with the others: {'; '.join(others)}"))
    claimed = [kind.name for kind in KINDS if kind.load is not None and kind.claims is not None]
    left = [p for name in [*claimed[:1], OTHER, *claimed[1:]] for p in scan.found.of(name)]  # step files first
    if left:
        names = ", ".join(p.name for p in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        store.notes.append(LoadNote("warning", "jobs", f"{len(left)} inputs that are not traces ({names}) cannot "
                                    "be told apart by job and were left out: analyze them on their own"))


def _reduce_traces(store: Store, results: list[FileResult], spill_from: int) -> None:
    ok = [(r, r.facts) for r in results if r.ok and r.facts is not None]
    for r in results:
        if not r.ok:
            store.notes.append(LoadNote("error", r.path, r.error))
        for message, data in r.notes:
            store.notes.append(LoadNote("info" if data.get("info") else "warning", r.path, message, data))
    idents = [TraceIdentity(Path(r.path), t.rank, t.rank_source, t.host, t.world_size, t.backend, *t.window_ns())
              for r, t in ok]
    for note in assign_windows(idents):
        store.notes.append(LoadNote("info", "ranks", note))
    steps, rank_rows = [], []
    spill = _EventSpill(store, spill_from)
    pg_configs: dict[str, ProcessGroup] = {}
    for (r, t), ident in zip(ok, idents):
        if isinstance(tables := result_tables(r), str):  # its cache entry was damaged after the map step
            store.notes.append(LoadNote("error", r.path, tables))
            continue
        ev, st = tables
        for frame in (ev, st):
            frame["rank"] = np.full(len(frame), ident.rank, dtype=np.int32)
            frame["window"] = np.full(len(frame), ident.window, dtype=np.int16)
        spill.add(ev, -1 if ident.rank is None else ident.rank)
        steps.append(st)
        rank_rows.append({**asdict(t), "rank": ident.rank, "window": ident.window, "file": r.path})  # set_table keeps the columns
        sources = pg_sources(t.pg_config)
        for name, desc, size, ranks in pg_groups(t.pg_config):  # the first trace naming a group says its ranks
            if name not in pg_configs or (pg_configs[name].source != "kineto_pg_config" and name not in sources):
                pg_configs[name] = ProcessGroup(name, desc, size, tuple(expand_ranks(ranks)),
                                                sources.get(name, "kineto_pg_config"))
    if ok:
        spill.finish()
        store.set_table("steps", _concat(steps))
        store.set_table("ranks", pd.DataFrame(rank_rows))
    store.run_info.process_groups = pg_configs
    _note_missing_ranks(store)


class _EventSpill:
    """The reduce's events: kept as frames while they are few, written as the Store's Parquet parts on disk
    (`store.event_parts`) from the moment they reach `spill_from` rows (0: always; the parts written so far
    go first), so the all-rank table is never built in memory at many ranks."""

    def __init__(self, store: Store, spill_from: int) -> None:
        self.store, self.spill_from = store, spill_from
        self.frames: list[tuple[pd.DataFrame, int]] = []
        self.rows = 0
        self.problems: list[str] = []

    def add(self, events: pd.DataFrame, rank: int) -> None:
        self.rows += len(events)
        if self.store.event_parts is None:
            self.frames.append((events, rank))
            if self.rows < self.spill_from:
                return
            self.store.event_parts = EventParts()
            frames, self.frames = self.frames, []
        else:
            frames = [(events, rank)]
        for frame, of_rank in frames:
            self.store.event_parts.add(conform("events", frame, self.problems), of_rank)

    def finish(self) -> None:
        if self.store.event_parts is None:
            if self.frames:
                self.store.set_table("events", _concat([frame for frame, _ in self.frames]))
            return
        self.store.event_parts.finish()
        if self.problems:
            problems = _summed_problems(self.problems)
            self.store.notes.append(LoadNote("warning", "table events", "; ".join(problems), {"problems": problems}))


def _summed_problems(problems: list[str]) -> list[str]:
    """conform's problems of several parts ("events.col: N value(s) ...") as one per column and kind, N summed."""
    counts: Counter[tuple[str, str]] = Counter()
    for problem in problems:
        column, _, rest = problem.partition(": ")
        number, _, what = rest.partition(" ")
        counts[column, what] += int(number) if number.isdigit() else 0
    return [f"{column}: {n} {what}" for (column, what), n in counts.items()]


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """pd.concat, keeping category columns categorical when the frames' categories differ.

    Each column gets the sorted union of the frames' categories (the values present), which is what
    concatenating as strings and converting back would make, without building the strings.
    """
    for col in frames[0].columns:
        dtypes = [f[col].dtype for f in frames]
        if not any(isinstance(d, pd.CategoricalDtype) for d in dtypes) or all(d == dtypes[0] for d in dtypes):
            continue
        values: set[str] = set()
        for f in frames:
            column = f[col]
            values.update(column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) else column.dropna())
        dtype = pd.CategoricalDtype(pd.Index(sorted(values), dtype="str"))
        for f in frames:
            f[col] = f[col].astype(dtype)
    return pd.concat(frames, ignore_index=True)


def _note_missing_ranks(store: Store) -> None:
    ranks = store.ranks
    if ranks.empty:
        return
    world = int(ranks["world_size"].max())
    present = sorted({int(r) for r in ranks["rank"]})
    if world > len(present):
        missing = world - len(present)
        store.notes.append(LoadNote(
            "info", "ranks",
            f"traces cover {len(present)} of {world} ranks ({missing} not profiled); cross-rank results "
            "describe the profiled ranks only",
            {"present": present[:64], "world_size": world},
        ))


EVERY_INPUT = "."
_DEFAULT_WHAT = "made up, not collected"


def checked_manifest(manifest: dict[str, Any]) -> tuple[dict[str, Any], list[LoadNote]]:
    """The manifest with the numbers analyzers read (world_size, exit_code) kept only when in range."""
    checked = dict(manifest)
    notes = []
    for key, lo, hi in (("world_size", 1, MAX_RANK + 1), ("exit_code", -(2**31), 2**31 - 1)):
        if key in checked and checked[key] is not None and int_in(checked[key], lo, hi) is None:
            notes.append(LoadNote("warning", "manifest.json", f"'{key}' is {str(checked.pop(key))[:40]!r}, not a "
                                  f"number from {lo} to {hi}; ignored"))
    return checked, notes


def synthetic_inputs(manifest: dict[str, Any]) -> tuple[list[SyntheticInput], list[LoadNote]]:
    raw = manifest.get("synthetic")
    if raw is None or raw is False:
        return [], []
    author = str(manifest.get("created_by") or manifest.get("generated_by") or "")
    if raw is True or (isinstance(raw, str) and raw.strip().lower() == "all"):
        return [SyntheticInput(EVERY_INPUT, author, "every input of the run is " + _DEFAULT_WHAT)], []
    entries = raw if isinstance(raw, list) else [raw]
    found: list[SyntheticInput] = []
    notes: list[LoadNote] = []
    for i, entry in enumerate(entries):
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path.strip():
            notes.append(LoadNote("warning", MANIFEST,
                                  f"'synthetic' entry {i + 1} is not an object with a 'path' ({str(entry)[:80]!r}); "
                                  "it is ignored: write {\"path\": ..., \"made_by\": ..., \"what\": ...}"))
            continue
        assert isinstance(entry, dict)
        found.append(SyntheticInput(path.strip(), str(entry.get("made_by") or author),
                                    str(entry.get("what") or _DEFAULT_WHAT)))
    return found, notes
