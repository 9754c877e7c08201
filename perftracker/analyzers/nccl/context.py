"""The NCCL analyzers' view of a Store (`build_context`): processes with their log facts, settings, sysfs, profile,
measured bus bandwidths and what NCCL's RAS client reported (`ras_records`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Unpack

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.evidence.network import NcclConfigEvidence
from perftracker.store import Store
from perftracker.values import strtoll_base0

ANALYZER = "nccl_config"


@dataclass
class Proc:
    """One process of one log file: its facts as key -> [(value, first line, count)]."""

    file: str
    host: str
    pid: int
    ranks: list[int]
    facts: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)

    def values(self, key: str) -> list[str]:
        return [v for v, _, _ in self.facts.get(key, [])]

    def has(self, key: str) -> bool:
        return key in self.facts

    def where(self, key: str, value: str | None = None) -> str:
        for v, line, _ in self.facts.get(key, []):
            if value is None or v == value:
                return f"{self.file}:{line}"
        return self.file

    def jsons(self, key: str) -> list[dict[str, Any]]:
        out = []
        for v in self.values(key):
            try:
                data = json.loads(v)
            except ValueError:
                continue
            if isinstance(data, dict):
                out.append(data)
        return out

    @property
    def transport(self) -> str:
        """ib, socket, plugin or unknown (ib covers RoCE and IB-based plugins)."""
        nets = self.values("network")
        for net in nets:
            low = net.lower()
            if low.startswith("ib") or (self.has("nic") and low != "socket"):
                return "ib"
        if "Socket" in nets:
            return "socket"
        vias = self.values("via")
        if any(v.startswith("NET/IB") for v in vias) or self.has("nic") or self.has("completion_error"):
            return "ib"
        if any(v.startswith("NET/Socket") for v in vias):
            return "socket"
        if nets:
            return "plugin"
        if self.has("ib_no_device") or self.has("ibverbs_missing"):
            return "socket"
        return "unknown"

    @property
    def link_layers(self) -> set[str]:
        layers = {str(n.get("link_layer")) for n in self.jsons("nic")}
        for qp in self.jsons("qp"):
            layers.add("RoCE" if qp.get("gid_index") is not None else "IB" if qp.get("lid") is not None else "")
        return {x for x in layers if x}

    @property
    def first_line(self) -> int:
        return min((line for facts in self.facts.values() for _, line, _ in facts if line > 0), default=1 << 62)


@dataclass
class Setting:
    key: str
    value: str
    host: str
    rank: int
    pid: int
    source: str
    evidence: str


@dataclass(frozen=True)
class Measure:
    """One measured bus bandwidth: where from, what, its peak GB/s and the size it was reached at."""

    source: str  # nccl_tests | inspector
    what: str  # the test (all_reduce_perf) or the Inspector collective (AllReduce in comm 0x...)
    busbw_gbs: float
    size_bytes: int
    where: str  # file:line
    gpus: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    nranks: int = -1
    wrong: int = 0  # values nccl-tests found wrong (out-of-place and in-place, N/A not counted)
    avg_busbw_gbs: float = float("nan")


def _tests(frame: pd.DataFrame) -> Iterator[Measure]:
    if frame.empty:
        return
    for (file, index), rows in frame.groupby(["file", "test_index"], sort=True):
        best = rows[["oop_busbw", "ip_busbw"]].max(axis=1).fillna(-1.0)
        peak = rows.iloc[int(best.to_numpy().argmax())]
        wrong = int(rows["oop_wrong"].clip(lower=0).sum() + rows["ip_wrong"].clip(lower=0).sum())
        gpus = tuple(sorted({g for v in rows["gpus"].dropna() for g in str(v).split(",") if g}))
        hosts = tuple(sorted({h for v in rows["hosts"].dropna() for h in str(v).split(",") if h}))
        yield Measure("nccl_tests", str(peak["test"]) or f"test {int(str(index)) + 1}", float(best.max()),
                      int(peak["size_bytes"]), f"{file}:{int(peak['line'])}", gpus, hosts,
                      int(peak["nranks"]), wrong, float(peak["avg_busbw"]))


def _inspector(frame: pd.DataFrame) -> Iterator[Measure]:
    if frame.empty or "busbw_gbs" not in frame:
        return
    coll = frame[(frame["kind"].astype(str) == "coll") & frame["busbw_gbs"].notna()]
    for (comm, op), rows in coll.groupby([coll["comm_id"].astype(str), coll["op"].astype(str)], sort=True):
        peak = rows.iloc[int(rows["busbw_gbs"].to_numpy().argmax())]
        hosts = tuple(sorted({str(h) for h in rows["host"].dropna()}))
        yield Measure("inspector", f"{op} in communicator {comm}", float(peak["busbw_gbs"]),
                      int(peak["bytes"]), str(peak["file"]), (), hosts, int(peak["comm_size"]))


def measured_busbw(store: Store) -> list[Measure]:
    """Every nccl-tests test's and Inspector collective's peak bus bandwidth (docs/internals/analyzers.md)."""
    return [*_tests(store["nccl_tests"]), *_inspector(store["nccl_collectives"])]


@dataclass(frozen=True)
class RasRecord:
    kind: str  # dead | missing_process | missing_rank | comm_error | comm_mismatch | comm_group | timeout
    comm: str
    rank: int
    host: str
    pid: int
    gpu: str
    detail: str
    where: str

    def process(self) -> str:
        if self.pid < 0:
            return f"rank {self.rank} of communicator {self.comm}" if self.comm else "a process"
        gpu = f" (GPU {self.gpu})" if self.gpu else ""
        return f"process {self.pid} on {self.host or '?'}{gpu}"


def ras_records(store: Store) -> list[RasRecord]:
    """The RAS rows of the Store, typed."""
    frame = store["nccl_ras"]
    if frame.empty:
        return []
    cols = [frame[c].astype(object).tolist() for c in ("kind", "comm", "rank", "host", "pid", "gpu", "detail", "file",
                                                       "line")]
    return [RasRecord(str(k), str(c or ""), int(str(r)), str(h or ""), int(str(p)), str(g or ""), str(d or ""),
                      f"{f}:{int(str(ln))}" if int(str(ln)) > 0 else str(f))
            for k, c, r, h, p, g, d, f, ln in zip(*cols)]


@dataclass
class NcclContext:
    procs: list[Proc]
    orphans: dict[str, Proc]
    warn_lines: dict[str, int]
    settings: dict[str, list[Setting]]
    sysfs: list[dict[str, Any]]
    profile: dict[str, Any]
    measured: list[Measure] = field(default_factory=list)  # nccl-tests / Inspector bus bandwidth (`measured_busbw`)
    ras: list[RasRecord] = field(default_factory=list)  # what NCCL's RAS client reported (`ras_records`)

    @property
    def empty(self) -> bool:
        return not self.procs and not self.settings and not self.orphans and not self.measured and not self.ras

    def network_unused(self) -> bool:
        """The log shows the job's transports and none is a network one, on one node: the NET settings (GDR,
        NCCL_IB_*, the net plugin) govern nothing it does."""
        vias = {v for p in self.procs for v in p.values("via")}
        return bool(vias) and not any(v.startswith(("NET/", "COLLNET")) for v in vias) and not self.multi_node()

    @property
    def nccl_evident(self) -> bool:
        """An NCCL log or an NCCL_* setting exists."""
        return bool(self.procs or self.orphans or any(k.startswith("NCCL_") for k in self.settings))


    def profile_value(self, var: str) -> str | None:
        spec = self.profile.get("values", {}).get(var)
        return str(spec["value"]) if isinstance(spec, dict) else None

    def profile_why(self, var: str) -> str:
        spec = self.profile.get("values", {}).get(var)
        return str(spec.get("consequence", "")) if isinstance(spec, dict) else ""

    def configured(self, var: str) -> list[Setting]:
        """Values from environments and env files (what the user set)."""
        return [s for s in self.settings.get(var, []) if s.source != "nccl_echo"]

    def echoed(self, var: str) -> list[Setting]:
        return [s for s in self.settings.get(var, []) if s.source == "nccl_echo"]

    def distinct(self, var: str) -> dict[str, list[Setting]]:
        out: dict[str, list[Setting]] = {}
        for s in self.settings.get(var, []):
            out.setdefault(s.value, []).append(s)
        return out

    def hosts(self) -> list[str]:
        return list(dict.fromkeys(p.host for p in sorted(self.procs, key=lambda p: (p.file, p.first_line))))

    def multi_node(self) -> bool:
        if len(self.hosts()) > 1:
            return True
        for p in self.procs:
            if any(int(v) > 1 for v in p.values("nnodes") if v.isdigit()):
                return True
        world, local = ([strtoll_base0(s.value)[0] for s in self.settings.get(key, [])]
                        for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"))
        return bool(world and local) and max(world) > max(local) > 0

    def version(self) -> tuple[int, int, int] | None:
        for p in [*self.orphans.values(), *self.procs]:
            for v in p.values("version"):
                parts = v.split(".")
                if len(parts) == 3 and all(x.isdigit() for x in parts):
                    return int(parts[0]), int(parts[1]), int(parts[2])
        return None

    def rdma_ports(self) -> list[tuple[str, dict[str, Any]]]:
        return [(d["device"], port) for node in self.sysfs for d in node.get("rdma", []) for port in d["ports"]]

    def rdma_devices(self) -> list[str]:
        return sorted({d["device"] for node in self.sysfs for d in node.get("rdma", [])})

    def roce(self) -> bool | None:
        """True when the fabric is RoCE (sysfs Ethernet link layer or /RoCE ports in logs), None if unknown."""
        layers = {port.get("link_layer", "") for _, port in self.rdma_ports()}
        for p in self.procs:
            layers |= {"Ethernet" if x == "RoCE" else "InfiniBand" for x in p.link_layers}
        if "Ethernet" in layers:
            return True
        if "InfiniBand" in layers:
            return False
        return True if self.profile.get("fabric") == "roce" else None


def build_context(store: Store) -> NcclContext:
    """Group the Store's NCCL facts per process and its config rows per variable."""
    procs: dict[tuple[str, str, int], Proc] = {}
    orphans: dict[str, Proc] = {}
    warn_lines: dict[str, int] = {}
    nccl: pd.DataFrame = store["nccl"]
    cols = [nccl[c].astype(object).tolist() for c in ("file", "host", "pid", "key", "value", "line", "count")]
    for file_o, host_o, pid_o, key_o, value_o, line_o, count_o in zip(*cols):
        file, host, pid = str(file_o), str(host_o), int(str(pid_o))
        key, value = str(key_o), str(value_o)
        if key == "warn_lines":
            warn_lines[file] = warn_lines.get(file, 0) + int(value)
            continue
        if pid < 0:
            proc = orphans.setdefault(file, Proc(file, "", -1, []))
        else:
            proc = procs.setdefault((file, host, pid), Proc(file, host, pid, []))
        if key == "rank":
            proc.ranks.append(int(value))
        proc.facts.setdefault(key, []).append((value, int(str(line_o)), int(str(count_o))))
    settings: dict[str, list[Setting]] = {}
    config: pd.DataFrame = store["config"]
    ccols = [config[c].astype(object).tolist() for c in ("key", "value", "host", "rank", "pid", "source", "evidence")]
    for key_o, value_o, host_o, rank_o, pid_o, source_o, ev_o in zip(*ccols):
        s = Setting(str(key_o), "" if value_o is None or pd.isna(value_o) else str(value_o), str(host_o),
                    int(str(rank_o)), int(str(pid_o)), str(source_o), str(ev_o))
        settings.setdefault(s.key, []).append(s)
    return NcclContext(list(procs.values()), orphans, warn_lines, settings, list(store.run_info.sysfs),
                       store.run_info.nccl_profile, measured_busbw(store), ras_records(store))


def context_view(analysis: Analysis) -> NcclContext:
    """`build_context` of the analysis's Store."""
    return build_context(analysis.store)


def summarize(ctx: NcclContext) -> dict[str, Any]:
    """transport, link_layer, nccl_version, nranks, hosts, warn_lines of everything in `ctx`."""
    transports = {p.transport for p in ctx.procs}
    transport = next((t for t in ("ib", "socket", "plugin") if t in transports), "unknown")
    layers = set().union(*(p.link_layers for p in ctx.procs))
    link = "mixed" if len(layers) > 1 else {"IB": "infiniband", "RoCE": "roce"}.get(next(iter(layers), ""), None)
    version = ctx.version()
    nranks = [int(v) for p in ctx.procs for v in p.values("nranks") if v.isdigit()]
    return {
        "transport": transport, "link_layer": link,
        "nccl_version": ".".join(map(str, version)) if version else None,
        "nranks": max(nranks) if nranks else None, "hosts": ctx.hosts(),
        "warn_lines": sum(ctx.warn_lines.values()),
    }


@dataclass(frozen=True)
class NcclFinding(Finding):
    """A finding of the NCCL rules, naming the NCCL variables it is about (`variables`, sorted).

    The variables are for views (the report highlights them in the configuration table); they are
    not part of findings.json, whose record of a finding is `Finding.to_dict`.
    """

    variables: tuple[str, ...] = ()


_LEADING_VAR = re.compile(r"^(NCCL_[A-Z0-9_]+)")


def finding(flag: str, severity: Severity, title: str, recommendation: str, evidence: NcclConfigEvidence,
            hosts: tuple[str, ...] | list[str] = (), ranks: tuple[int, ...] | list[int] = (),
            key: str = "", subject: str = "", variables: tuple[str, ...] | list[str] = ()) -> NcclFinding:
    """A config finding: no per-step cost, `flag` recorded in the evidence, about `variables`, and `subject`
    (what the problem is about: a variable, a link) too; by default the NCCL variable the title starts with.
    Findings with one subject become one finding (`merge.one_per_subject`)."""
    hosts_t = tuple(sorted({h for h in hosts if h}))
    ranks_t = tuple(sorted({r for r in ranks if r >= 0}))
    named = _LEADING_VAR.match(title)
    about = subject or (named.group(1) if named else "")
    ev = NcclConfigEvidence(flag=flag, subject=about) if about else NcclConfigEvidence(flag=flag)
    ev.update(evidence)
    return NcclFinding(analyzer=ANALYZER, severity=severity, title=title, recommendation=recommendation, evidence=ev,
                       hosts=hosts_t, ranks=ranks_t, key=f"{flag}|{key or title}", variables=tuple(sorted(set(variables))))


def about(var: str, settings: list[Setting], flag: str, severity: Severity, title: str, recommendation: str, /,
          key: str, ranks: bool = True, **evidence: Unpack[NcclConfigEvidence]) -> NcclFinding:
    """A finding about `settings` of `var`: their hosts (and ranks), the first four as `env` evidence."""
    return finding(flag, severity, title, recommendation, NcclConfigEvidence(env=setting_refs(settings, 4), **evidence),
                   [s.host for s in settings], [s.rank for s in settings] if ranks else [], key=key, variables=[var])


def setting_refs(settings: list[Setting], limit: int = 8) -> list[str]:
    """Short evidence strings for settings: `VAR=value (source evidence)`."""
    return [f"{s.key}={s.value!r} ({s.source} {s.evidence})" for s in settings[:limit]]


def is_intended(ctx: NcclContext, var: str, value: str) -> bool:
    """A profile's own value is by definition intended."""
    return ctx.profile_value(var) == value
