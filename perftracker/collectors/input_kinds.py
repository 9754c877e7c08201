"""The kinds of input perftracker reads: which file is which, how each is loaded, which tables it fills.

Promise: `KINDS` is the one list of input kinds; `classify(inputs)` offers every file to the kinds in list order
(the first that claims it takes it; the rest go to the pool the content kinds read). Nowhere else is a file's
kind decided (`tests/test_architecture.py`). A new input format is a new entry here (docs/internals/collectors.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from perftracker.collectors.counters.inputs import load_counter_inputs
from perftracker.collectors.framework_logs import load_framework_logs
from perftracker.collectors.nccl.inputs import load_nccl_inputs, process_groups
from perftracker.collectors.nccl.inspector import is_inspector_file, load_inspector_inputs
from perftracker.collectors.nccl.nccl_tests import load_nccl_tests
from perftracker.collectors.nccl.ras import is_ras_file, load_ras
from perftracker.collectors.nsys.database import looks_like_export
from perftracker.collectors.postmortem.joblogs import is_postmortem_file, load_postmortem_inputs
from perftracker.collectors.stacks.samples import is_baseline_profile, is_profile_file, load_profile_inputs
from perftracker.collectors.stacks.snapshots import is_stack_file, load_stack_inputs
from perftracker.collectors.steps import load_step_files
from perftracker.collectors.traces.execution_trace import is_execution_trace, load_execution_trace_inputs
from perftracker.collectors.whatif_ops.inputs import is_ideal_timeline, load_whatif_inputs, looks_like_meta
from perftracker.collectors.whatif_ops.records import is_expected_result, is_ops_parquet, is_ops_timeline
from perftracker.rundir import NON_TRACE_DIRS, OUTPUT_FILES, TRACE_SUFFIXES, Inputs
from perftracker.store import LoadNote, RunInfo, Store
from perftracker.store.schema import conform

if TYPE_CHECKING:
    from perftracker.collectors.loading import LoadOptions

STEP_NAME = re.compile(r"rank[-_]?-?\d+\.jsonl$")
OTHER = "other"  # the pool of files no kind claimed, which the content kinds read
KINETO = "kineto_traces"
NSYS = "nsys_exports"


@dataclass(frozen=True)
class Offer:
    """A file offered to the kinds: its path, whether its name is a trace's, whether it was given alone (not
    found in a folder), and the sidecars of the sampled profiles found with it."""

    path: Path
    trace_named: bool
    alone: bool
    profile_sidecars: frozenset[Path] = frozenset()


Loader = Callable[[Store, list[Path], "LoadOptions"], None]


@dataclass(frozen=True)
class InputKind:
    """One kind of input. `claims(offer)` takes a file (None: the kind reads the pool by content);
    `load(store, paths, options)` puts its tables into the Store (None: no loader of its own)."""

    name: str
    what: str
    claims: Callable[[Offer], bool] | None
    load: Loader | None
    tables: tuple[str, ...] = ()
    usable: tuple[str, ...] = ()
    to_pool: bool = False  # what it claims goes to the pool, read by content (named like a trace, but not one)


@dataclass
class Classified:
    """The files of each kind, in the order they were found (the pool: unclaimed files, then `to_pool` ones)."""

    files: dict[str, list[Path]] = field(default_factory=dict)

    def of(self, kind: str) -> list[Path]:
        return self.files.get(kind, [])


def looks_like_trace(path: Path) -> bool:
    """Named like a torch.profiler trace (`*.json`, `*.json.gz`), and not one of the run directory's other JSON
    files (outputs, manifests, execution traces `*_et.json`, files of its non-trace folders)."""
    name = path.name
    if name in OUTPUT_FILES or name.endswith("_et.json.gz") or name.endswith("_et.json"):
        return False
    if path.parent.name in NON_TRACE_DIRS:
        return False
    return name.endswith(TRACE_SUFFIXES)


def classify(inputs: Inputs) -> Classified:
    """Every file of `inputs` to the first kind of `KINDS` that claims it; the rest to the pool."""
    sidecars = frozenset(p.with_suffix(".json") for p in inputs.files
                         if not looks_like_trace(p) and is_profile_file(p))
    found = Classified({kind.name: [] for kind in KINDS})
    found.files[OTHER] = []
    moved: list[Path] = []
    for path in inputs.files:
        offer = Offer(path, looks_like_trace(path), inputs.alone, sidecars)
        kind = next((k for k in KINDS if k.claims is not None and k.claims(offer)), None)
        if kind is None:
            found.files[OTHER].append(path)
        elif kind.to_pool:
            moved.append(path)
        else:
            found.files[kind.name].append(path)
    found.files[OTHER].extend(moved)
    return found


def merge(store: Store, tables: dict[str, pd.DataFrame], notes: list[LoadNote], learned: RunInfo) -> None:
    """Put one loader's tables, notes and what it learned about the run into the Store."""
    for name, frame in tables.items():
        store.set_table(name, frame)
    store.add_notes(notes)
    store.run_info.learn(learned)


def _load_step_files(store: Store, paths: list[Path], options: LoadOptions) -> None:
    if not paths:
        return
    steps, phases, hosts, notes = load_step_files(paths)
    store.add_notes(notes)
    if not steps.empty:
        store.set_table("steps", pd.concat([store.steps, steps], ignore_index=True))
    store.set_table("phases", phases)
    store.run_info.step_hosts = dict(hosts)
    ranks = store.ranks
    if ranks.empty and hosts:
        rows = [{"rank": r, "window": 0, "host": h} for r, h in sorted(hosts.items())]
        store.set_table("ranks", pd.DataFrame(rows))
    elif hosts:
        filled = ranks.copy()
        empty_host = filled["host"].isna() | (filled["host"] == "")
        filled.loc[empty_host, "host"] = filled.loc[empty_host, "rank"].map(hosts)
        store.set_table("ranks", conform("ranks", filled.fillna({"host": ""})))


def _load_framework_logs(store: Store, paths: list[Path], options: LoadOptions) -> None:
    """Reported throughput always; step times only for a run with no other step record (traces or the hook's
    files time the same steps better: a log's steps beside them would count each step twice)."""
    tables, notes = load_framework_logs(paths)
    steps = tables.pop("steps")
    unused = not steps.empty and not store.steps.empty
    merge(store, tables, [n for n in notes if not (unused and n.level == "info")], RunInfo())
    if not steps.empty and store.steps.empty:
        store.set_table("steps", steps)
        if store.ranks.empty:
            ranks = sorted(r for r in steps["rank"].unique() if r >= 0)
            store.set_table("ranks", conform("ranks", pd.DataFrame(
                [{"rank": r, "window": 0, "host": ""} for r in ranks], columns=["rank", "window", "host"])))
    elif unused:
        store.add_notes([LoadNote("info", "framework logs", "the step lines of the training log(s) are not used: "
                                  "the traces or the hook's step files time the steps")])


def _load_nccl(store: Store, paths: list[Path], options: LoadOptions) -> None:
    tables, notes, learned = load_nccl_inputs(paths, profile=options.nccl_profile, sysfs_root=options.sysfs_root,
                                              sysfs_host=options.sysfs_host)
    merge(store, tables, notes, learned)
    for name, group in process_groups(tables["nccl"]).items():  # a group the traces declared keeps their record
        store.run_info.process_groups.setdefault(name, group)


def _found(read: Callable[[list[Path]], tuple[dict[str, pd.DataFrame], list[LoadNote]]], table: str) -> Loader:
    """A loader putting `read`'s tables and notes into the Store when it found rows of `table` or said something."""
    def load(store: Store, paths: list[Path], options: LoadOptions) -> None:
        tables, notes = read(paths)
        if not tables[table].empty or notes:
            merge(store, tables, notes, RunInfo())
    return load


def _merged(read: Callable[[list[Path]], tuple[dict[str, pd.DataFrame], list[LoadNote], RunInfo]],
            only_given: bool = False) -> Loader:
    """A loader merging what `read` returns (`only_given`: not called without files)."""
    def load(store: Store, paths: list[Path], options: LoadOptions) -> None:
        if paths or not only_given:
            merge(store, *read(paths))
    return load


def _per_table(read: Callable[[list[Path]], tuple[pd.DataFrame, list[LoadNote]]],
               table_of: Callable[[Path], str], tables: tuple[str, ...]) -> Loader:
    """A loader reading the files `table_of` gives each of `tables` into it, in that order (not without files)."""
    def load(store: Store, paths: list[Path], options: LoadOptions) -> None:
        for table in tables:
            if chosen := [p for p in paths if table_of(p) == table]:
                frame, notes = read(chosen)
                store.set_table(table, frame)
                store.add_notes(notes)
    return load


# The window's profiles, and those of a watcher's baseline window (`baseline/profiles/`, in an incident's evidence)
PROFILE_TABLES = ("profile_samples", "baseline_profile_samples")
_load_stacks = _per_table(load_stack_inputs, lambda _: "stacks", ("stacks",))
_load_profiles = _per_table(load_profile_inputs, lambda p: PROFILE_TABLES[is_baseline_profile(p)], PROFILE_TABLES)


def _claims_pipeline_ops(offer: Offer) -> bool:
    path = offer.path
    return (is_ops_parquet(path) or looks_like_meta(path)
            or (offer.trace_named and (is_ideal_timeline(path) or is_ops_timeline(path))))


POOL = None  # `claims` of a kind that reads the pool (the files no kind claimed) and picks its own by content


# The kinds, in the order files are offered to them and then loaded (the Kineto traces are mapped first).
KINDS: tuple[InputKind, ...] = (
    InputKind("step_files", "steps/rank-<r>.jsonl of a run directory (the in-job hook's step records)",
              lambda o: not o.alone and o.path.parent.name == "steps" and STEP_NAME.search(o.path.name) is not None,
              _load_step_files, ("steps", "phases", "ranks"), ("steps",)),
    InputKind("framework_logs", "training logs whose lines Megatron-LM, DeepSpeed, HF Trainer, Lightning, torchtitan "
              "or NeMo printed (by content: framework_logs.looks_like_framework_log), read once: their step times, "
              "as attach reads them (formats/framework_steps.py), and the TFLOP/s and MFU they report "
              "(formats/framework_throughput.py)", POOL, _load_framework_logs,
              ("steps", "ranks", "reported_throughput"), ("steps",)),
    InputKind("nccl_logs", "NCCL_DEBUG output (any file whose lines NCCL wrote: looks_like_nccl_log) and the "
              "env/rank-<r>.json environment snapshots", POOL, _load_nccl, ("nccl", "config"),
              ("nccl", "config")),
    InputKind("nccl_tests", "nccl-tests output (all_reduce_perf, ...: its tables, in any text file, by content: "
              "looks_like_nccl_tests)", POOL, _found(load_nccl_tests, "nccl_tests"), ("nccl_tests",),
              ("nccl_tests",)),
    InputKind("nccl_ras", "NCCL RAS client output (ncclras text, JSON or monitor events, by content: is_ras_file)",
              POOL, _found(load_ras, "nccl_ras"), ("nccl_ras",), ("nccl_ras",)),
    InputKind("counters", "host counters: RDMA/GPU/net JSON lines, ethtool and ip dumps, sysfs copies, Prometheus "
              "text, scheduler accounting and sampled process states (by their first bytes: counters.inputs.sniff)", POOL,
              _merged(load_counter_inputs), ("counters", "devices", "netdev", "net_ifaces", "cpu_sched", "proc_states"),
              ("counters", "netdev")),
    InputKind("stack_snapshots", "stacks/<snapshot>/rank-<r>.json: py-spy dumps attach took", lambda o: is_stack_file(o.path),
              _load_stacks, ("stacks",), ("stacks",)),
    InputKind("stack_profiles", "profiles/rank-<r>.txt: sampled stacks (py-spy record --format raw)",
              lambda o: not o.trace_named and is_profile_file(o.path), _load_profiles,
              PROFILE_TABLES, ("profile_samples",)),
    InputKind("profile_sidecars", "profiles/rank-<r>.json beside a profile: its rank, pid and rate (read with it)",
              lambda o: not o.trace_named and o.path in o.profile_sidecars, None),
    InputKind("nccl_inspector", "NCCL Inspector output (<host>-pid<pid>.log JSON lines, by content: "
              "is_inspector_file)", lambda o: not o.trace_named and is_inspector_file(o.path),
              _merged(load_inspector_inputs, only_given=True), ("nccl_collectives",), ("nccl_collectives",)),
    InputKind("postmortem", "flight-recorder dumps, torchelastic error files, job logs and kernel logs (by "
              "content: postmortem.joblogs.classify)", POOL, _merged(load_postmortem_inputs),
              ("collectives_fr", "failures"), ("collectives_fr", "failures")),
    InputKind("execution_traces", "PyTorch / Chakra execution traces (*_et.json, or JSON with a schema and "
              "nodes: is_execution_trace)", POOL, _merged(load_execution_trace_inputs), ("exec_ops",)),
    InputKind("pipeline_ops", "per-operation records of a pipeline-parallel job (the OSDI'25 what-if artifact: "
              "trace-<job>.parquet, meta-<job>.yaml, timeline-<job>.json.gz; collectors/whatif_ops/)",
              _claims_pipeline_ops, _merged(load_whatif_inputs, only_given=True),
              ("pipeline_ops", "steps", "ranks"), ("pipeline_ops",)),
    InputKind("whatif_expected", "the OSDI'25 artifact's expected outputs (result-, ms-, mw-<job>.json): "
              "recognized, not read", lambda o: o.trace_named and is_expected_result(o.path), None),
    InputKind("named_like_a_trace", "*.json named like a trace that is a flight-recorder dump, an error file, an "
              "execution trace or NCCL RAS JSON (ncclras -f json): read by content with the pool",
              lambda o: o.trace_named and (is_postmortem_file(o.path) or is_execution_trace(o.path)
                                           or is_ras_file(o.path)), None, to_pool=True),
    InputKind(NSYS, "Nsight Systems exports (*.sqlite with StringIds and a CUPTI / NVTX table; *.nsys-rep / "
              "*.qdrep reports, exported with `nsys export` when it is on PATH): read per file "
              "(collectors/nsys/), then reduced with the Kineto traces", lambda o: looks_like_export(o.path), None,
              ("events", "steps", "ranks"), ("events", "steps")),
    InputKind(KINETO, "torch.profiler (Kineto) traces, *.json / *.json.gz, one per rank: mapped per file "
              "(collectors/traces/trace_map.py) on an engine, then reduced", lambda o: o.trace_named, None,
              ("events", "steps", "ranks"), ("events", "steps")),
)


def usable_tables(kinds: Sequence[InputKind] = KINDS) -> tuple[str, ...]:
    """The tables any of whose rows make a run worth analyzing (else `load_path` says no input could be used)."""
    return tuple(dict.fromkeys(name for kind in kinds for name in kind.usable))
