"""What the loaders learned about a run besides its tables: `RunInfo`, one per Store.

Every field typed and empty by default; loaders write it (merged with `learn`), analyzers read it. Options of an
analysis are not here: they are `AnalysisOptions`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class SyntheticInput:
    """One input of a run that was made up rather than collected, as the manifest's `synthetic` names it."""

    path: str  # relative to the run directory; "." for every input of the run
    made_by: str  # the script or tool that wrote it
    what: str  # what it pretends to be, in a sentence

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class ProcessGroup:
    """One process group of the job as an input declared it: the one record of group membership that
    matching, layout inference and the report read (a collective is matched only inside its group)."""

    name: str  # pg_name as the job named it ("0", "1", a hash, ...): the `pg` column of events carries it
    desc: str  # pg_desc ("default_pg", "mp_group", "DP", "PIPELINE_MODEL_PARALLEL_GROUP", ...); "" if unknown
    size: int  # members the input said the group has (-1 if it did not say)
    ranks: tuple[int, ...]  # global ranks in group-rank order; () where the input listed none
    source: str  # where membership came from: "kineto_pg_config", "flight_recorder", ...


@dataclass
class RunInfo:
    """Facts about one run that are not rows of a table."""

    # The path the analysis was given (run directory, folder of traces, or one file).
    input: str = ""
    # The run directory's manifest.json (rundir format: job, hosts, world_size, exit_code, ...); {} for a
    # bare folder of traces.
    manifest: dict[str, Any] = field(default_factory=dict)
    # Process groups the inputs name (the traces' distributedInfo.pg_config, ...): pg name -> its group.
    process_groups: dict[str, ProcessGroup] = field(default_factory=dict)
    # rank -> host as the step files (steps/rank-<r>.jsonl) name it.
    step_hosts: dict[int, str] = field(default_factory=dict)
    # RDMA devices and network interfaces of the nodes whose sysfs was read (collectors.counters.sysfs
    # `read_sysfs`, one entry per node); empty unless a sysfs root was given: a log folder copied from a
    # cluster says nothing about the machine analysing it.
    sysfs: list[dict[str, Any]] = field(default_factory=list)
    # The NCCL platform profile the configuration rules check against (collectors.nccl.profiles
    # `load_profile`): {"name", "description", "source", "fabric", "values": {VAR: {...}}}.
    nccl_profile: dict[str, Any] = field(default_factory=dict)
    # Flight recorder: pg name -> that group's pg_config entry ({"name", "desc", "ranks", ...}).
    fr_pg_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Flight recorder: rank (as the dump names it) -> pg name -> {"last_enqueued_collective", ...}.
    fr_pg_status: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # Watchdog lines of job logs: rank -> {"pg", "pg_desc", "seq", "last_enqueued", "last_completed"}.
    watchdog_progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Host-counter inputs: file kind (rdma_jsonl, gpu_jsonl, smi_csv, prometheus, ...) -> files loaded.
    counter_sources: dict[str, int] = field(default_factory=dict)
    # Inputs the manifest's `synthetic` entry says were made up, not collected (collectors/loading.py).
    synthetic_inputs: list[SyntheticInput] = field(default_factory=list)
    # The communication libraries the traces' comm kernels were matched to (events.comm_family):
    # family -> {"library": what it is, "expert_parallel": bool} (collectors/traces/comm_kernels.py).
    comm_libraries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def learn(self, learned: RunInfo) -> None:
        """Take every field one loader filled in `learned` (a loader fills only what its inputs told)."""
        for f in fields(self):
            value = getattr(learned, f.name)
            if value:
                setattr(self, f.name, value)
