"""`perftracker sanity`'s judgement: which nodes (and links) should the job not get, and why; each device's
expected figures (`expected_for`: the vendor's peak, with its source)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from perftracker.analyzers.findings import Finding, Severity, rank_findings
from perftracker.analyzers.sanity.causes import cpu_cause, link_cause
from perftracker.analyzers.sanity.results import DEVICE_FIGURES, SanityResults
from perftracker.analyzers.sanity.robust import LINK_FLOOR, Low, low_outliers
from perftracker.analyzers.sanity.table import best_pair, device_rows
from perftracker.analyzers.thresholds import threshold, threshold_int
from perftracker.evidence.traces import FigureRow, PairRow, SanityEvidence

INTRA_FIGURES = ("node_allreduce_busbw_gbps", "node_allgather_busbw_gbps")
ANALYZER = "sanity"
MAX_PAIRS_SHOWN = 64  # the slowest of a node's pairs kept in its finding's evidence
# Expected figures per device: the vendor's peak, with its source.
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5), nvidia.com/en-us/data-center/h100"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/h200"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), nvidia.com/en-us/data-center/a100"

PEAKS: dict[str, tuple[dict[str, float], str]] = {
    "H200": ({"gemm_bf16_tflops": 989.0, "gemm_fp16_tflops": 989.0, "gemm_tf32_tflops": 494.0,
              "gemm_fp8_tflops": 1979.0, "copy_gbps": 4800.0}, _H200),
    "H100": ({"gemm_bf16_tflops": 989.0, "gemm_fp16_tflops": 989.0, "gemm_tf32_tflops": 494.0,
              "gemm_fp8_tflops": 1979.0, "copy_gbps": 3350.0}, _H100),
    "A100": ({"gemm_bf16_tflops": 312.0, "gemm_fp16_tflops": 312.0, "gemm_tf32_tflops": 156.0,
              "copy_gbps": 2039.0}, _A100),
}


def expected_for(device_name: str, figure: str) -> tuple[float, str] | None:
    """(peak, source) for `figure` on the device named `device_name`, or None."""
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in device_name:
            peaks, source = PEAKS[key]
            return (peaks[figure], source) if figure in peaks else None
    return None


@dataclass
class SanityVerdict:
    """The findings, the per-device rows (worst first), and the hosts to exclude / keep."""

    findings: list[Finding]
    rows: list[dict[str, Any]]
    exclude: list[str]
    keep: list[str]
    node_status: dict[str, str] = field(default_factory=dict)


def _unit(record: Mapping[str, Any]) -> str:
    return f"{record['host']}/{record['local_rank']}"


def own_spread(record: Mapping[str, Any], figure: str) -> float:
    """The spread (max - min) of a device's own repeats of `figure`; 0 with fewer than two."""
    values = [float(v) for v in record.get("repeats", {}).get(figure, [])]
    return max(values) - min(values) if len(values) > 1 else 0.0


def _device_lows(records: list[dict[str, Any]]) -> dict[str, list[tuple[str, Low | None, str]]]:
    """unit -> [(figure, Low vs peers or None, note on the expected figure)] for every device below its peers by
    more than its peers' noise and its own repeats' spread, or below its expected figure."""
    out: dict[str, list[tuple[str, Low | None, str]]] = {}
    by_unit = {_unit(r): r for r in records}
    for figure in DEVICE_FIGURES:
        values = {_unit(r): float(r["figures"][figure]) for r in records if figure in r.get("figures", {})}
        for low in low_outliers(values):
            if low.peer_median - low.value <= own_spread(by_unit[low.unit], figure):
                continue  # within its own repeats' spread: this device's noise, not a slow device
            out.setdefault(low.unit, []).append((figure, low, ""))
        for r in records:
            known = expected_for(str(r.get("device_name", "")), figure)
            if known is None or figure not in r.get("figures", {}):
                continue
            share = float(r["figures"][figure]) / known[0]
            if share < threshold('sanity.expected_warn_share'):
                out.setdefault(_unit(r), []).append(
                    (figure, None, f"{share:.0%} of the device's {known[0]:g} datasheet peak"))
    return out


def _device_cause(cpu: bool, figures: set[str]) -> str:
    """The likely cause of a device's low figures, from which figures are low."""
    if cpu:
        return "CPU contention (another process or a CPU quota on this node) or a throttled CPU"
    causes = []
    if any(f.startswith("gemm_") for f in figures):
        causes.append("GPU clock throttling (power or thermal: NVML throttle reasons)")
    if "copy_gbps" in figures:
        causes.append("GPU memory clock throttling or a degraded HBM (ECC)")
    if figures & {"h2d_gbps", "d2h_gbps"}:
        causes.append("PCIe downtrained (NVML PCIe generation/width below its maximum)")
    return "; ".join(causes) or "a failing device"


def _node(status: dict[str, Severity], host: str, severity: Severity, title: str, recommendation: str,
          evidence: SanityEvidence, key: str, **more: Any) -> Finding:
    """A finding about one node (`key`|host), its severity raising the node's status."""
    status[host] = max(status.get(host, Severity.INFO), severity)
    return Finding(ANALYZER, severity, title, recommendation, evidence=evidence, hosts=(host,), key=f"{key}|{host}",
                   **more)


def judge(results: SanityResults, exclude_at: Severity = Severity.CRITICAL) -> SanityVerdict:
    """See docs/internals/analyzers.md."""
    records = [results.records[r] for r in sorted(results.records)]
    hosts = list(dict.fromkeys(results.hosts))
    reported = {r["host"] for r in records}
    findings: list[Finding] = []
    status: dict[str, Severity] = {}
    for host in hosts:
        if host in reported:
            continue
        ranks = tuple(i for i, h in enumerate(results.hosts) if h == host)
        findings.append(_node(
            status, host, Severity.CRITICAL, f"{host} is unreachable: its ranks {list(ranks)} sent no result within "
            f"the {results.time_box_s:g} s time box", "Exclude the node and check it (power, network, the launcher's "
            "log on it) before starting the job.", SanityEvidence(ranks=list(ranks)), "unreachable", ranks=ranks))
    for host in hosts:
        lost = [i for i, h in enumerate(results.hosts) if h == host and i not in results.records]
        if host not in reported or not lost:
            continue
        findings.append(_node(
            status, host, Severity.CRITICAL, f"{host}: ranks {lost} sent no result within the "
            f"{results.time_box_s:g} s time box while its other ranks did (a process or device of it failed)",
            "Exclude the node and read the launcher's log of these ranks on it before starting the job.",
            SanityEvidence(ranks=lost), "lost-ranks", ranks=tuple(lost)))
    nodes = {r["host"]: r.get("node", {}) for r in records if r.get("node")}
    common = set.intersection(*[set(r.get("figures", {})) for r in records]) if records else set()
    device_lows = _device_lows(records)
    named_on_compute: set[str] = set()
    by_host: dict[str, list[tuple[dict[str, Any], list[tuple[str, Low | None, str]]]]] = {}
    findings += _collective_failures(records, unreachable=bool(status))
    for r in records:
        failed = {k: v for k, v in r.get("errors", {}).items() if k in DEVICE_FIGURES and k not in common}
        items = device_lows.get(_unit(r), [])
        if failed:
            items = items + [(k, None, f"failed: {v}") for k, v in failed.items()]
        if items:
            by_host.setdefault(r["host"], []).append((r, items))
    for host, entries in by_host.items():
        sev = Severity.WARNING
        lines: dict[tuple[int, str], str] = {}  # one clause per device and figure: peers, then the peak
        figures: list[FigureRow] = []
        for r, items in entries:
            for figure, low, note in items:
                at = (r["rank"], figure)
                if low is not None:
                    sev = max(sev, low.severity)
                    lines[at] = (f"{figure} {low.value:.3g} on {r['device']} is {low.ratio:.0%} of its peers' "
                                 f"median {low.peer_median:.3g}")
                    figures.append(FigureRow(rank=r["rank"], device=r["device"], figure=figure, value=low.value,
                                             peer_median=low.peer_median, peer_mad=low.peer_mad,
                                             own_spread=own_spread(r, figure),
                                             repeats=r.get("repeats", {}).get(figure, []), confidence=low.confidence))
                else:  # critical for a failed test or a figure below sanity.expected_critical_share of its peak
                    known = expected_for(str(r.get("device_name", "")), figure)
                    critical = note.startswith("failed") or known is not None and float(
                        r.get("figures", {}).get(figure, 0.0)) < threshold("sanity.expected_critical_share") * known[0]
                    sev = max(sev, Severity.CRITICAL if critical else Severity.WARNING)
                    lines[at] = f"{lines[at]} and {note}" if at in lines else f"{figure} on {r['device']}: {note}"
                    figures.append(FigureRow(rank=r["rank"], device=r["device"], figure=figure, note=note,
                                             value=r["figures"].get(figure), source=known[1] if known else ""))
        cpu = all(str(r["device"]).startswith("cpu") for r, _ in entries)
        said, facts = cpu_cause([r for r, _ in entries], [r for r in records if r["host"] != host])
        cause = said or _device_cause(cpu, {e["figure"] for e in figures})
        ranks = tuple(sorted({r["rank"] for r, _ in entries}))
        confs = [e["confidence"] for e in figures if "confidence" in e]
        named_on_compute.add(host)
        findings.append(_node(
            status, host, sev, f"{host} measures below its peers: " + "; ".join(list(lines.values())[:4]) +
            f" (likely {cause})", "Exclude the node from this job (OUT/exclude.txt) and check it: " + cause + ".",
            SanityEvidence(figures=figures, likely_cause=cause, **facts), "device", ranks=ranks,
            confidence=min(confs) if confs else None))
    findings += _quota_held(records, named_on_compute, status)
    findings += _within_node(records, named_on_compute, status)
    findings += _links(records, nodes, named_on_compute, status)
    findings += _lint(nodes)
    findings += _cut_finding(results)
    ranked = rank_findings(findings)
    rows = device_rows(results, status)
    exclude = [h for h in hosts if status.get(h, Severity.INFO) >= exclude_at and h in status]
    keep = [h for h in hosts if h not in exclude]
    return SanityVerdict(ranked, rows, exclude, keep, {h: s.label for h, s in status.items()})


def _links(records: list[dict[str, Any]], nodes: Mapping[str, Mapping[str, Any]], named: set[str],
           status: dict[str, Severity]) -> list[Finding]:
    pairs = [p for r in records for p in r.get("pairs", [])]
    if not pairs:
        return []
    best = best_pair(pairs)
    by_host_pairs: dict[str, list[PairRow]] = {}  # the pairs as the ranks recorded them
    for p in pairs:
        for h in (p["a"], p["b"]):
            by_host_pairs.setdefault(h, []).append(p)
    findings = []
    slow_nodes = {low.unit: low for low in low_outliers(best, LINK_FLOOR)}
    failed_pairs = [p for p in pairs if p.get("gbps") is None and not p.get("cut")]
    for p in failed_pairs:  # a pair with no figure at all: both ends lost the other
        for host in (p["a"], p["b"]):
            if all(q.get("gbps") is None and not q.get("cut") for q in by_host_pairs[host]) and host not in slow_nodes:
                slow_nodes[host] = Low(host, 0.0, 0.0, 0.0, 1.0, Severity.CRITICAL, 0.99)
    for host, low in sorted(slow_nodes.items()):
        if host in named or status.get(host) == Severity.CRITICAL and host not in best:
            continue
        mine = list(by_host_pairs.get(host, []))
        cause, facts = link_cause(host, nodes)
        mine.sort(key=lambda p: -1.0 if (gbps := p.get("gbps")) is None else gbps)
        listed = ", ".join(f"{p['a']}-{p['b']} " + (f"{p['gbps']:.3g} GB/s" if p.get("gbps") is not None else
                                                   f"failed ({p.get('error', '')[:60]})") for p in mine[:4])
        listed += f" and {len(mine) - 4} more" if len(mine) > 4 else ""
        findings.append(_node(
            status, host, low.severity, f"{host}'s links are slow: its best pair reaches {low.value:.3g} GB/s, "
            f"{low.ratio:.0%} of the other nodes' median {low.peer_median:.3g} GB/s (pairs: {listed}); likely {cause}",
            "Exclude the node (OUT/exclude.txt), then check its NIC: rate and state (ethtool, ibstat), error "
            "counters, cable and switch port.", SanityEvidence(
                pairs=mine[:MAX_PAIRS_SHOWN], pair_count=len(mine), best_gbps=low.value,
                peer_median_gbps=low.peer_median, **facts), "link", confidence=low.confidence))
    explained = set(slow_nodes) | named
    measured = {f"{p['a']}\t{p['b']}": p for p in pairs if p.get("gbps") is not None}
    by_pair = {key: float(p["gbps"]) for key, p in measured.items()}
    if len(by_pair) >= threshold_int('sanity.min_pairs'):  # fewer pairs cannot tell one slow link from noise
        for low in low_outliers(by_pair, LINK_FLOOR):
            a, b = low.unit.split("\t")
            if a in explained or b in explained:
                continue
            pair = measured[low.unit]
            findings.append(Finding(
                ANALYZER, low.severity, f"the link between {a} and {b} is slow: {low.value:.3g} GB/s, "
                f"{low.ratio:.0%} of the other pairs' median {low.peer_median:.3g} GB/s, while both nodes reach "
                "their other peers at full rate", "Check the path between the two nodes (switch ports, cables, "
                "routing); exclude one of them if it cannot be fixed before the job.",
                evidence=SanityEvidence(pair=pair, peer_median_gbps=low.peer_median), hosts=(a, b),
                key=f"pair|{a}|{b}", confidence=low.confidence))
    return findings


def _within_node(records: list[dict[str, Any]], named: set[str], status: dict[str, Severity]) -> list[Finding]:
    """Nodes whose collectives among their own ranks are below the other nodes' (a node's figure: the median of
    its ranks'), judged apart from the links between nodes; a node named on compute is not named again."""
    findings = []
    lows: dict[str, list[tuple[str, Low]]] = {}
    for figure in INTRA_FIGURES:
        values: dict[str, list[float]] = {}
        for r in records:
            if figure in r.get("figures", {}):
                values.setdefault(r["host"], []).append(float(r["figures"][figure]))
        for low in low_outliers({h: statistics.median(v) for h, v in values.items()}, LINK_FLOOR):
            lows.setdefault(low.unit, []).append((figure, low))
    for host, found in sorted(lows.items()):
        if host in named:
            continue
        sev = max(low.severity for _, low in found)
        gpu = any(str(r["device"]).startswith("cuda") for r in records if r["host"] == host)
        cause = ("NVLink or PCIe between its GPUs (nvidia-smi topo -m, NVLink error counters) or a GPU whose PCIe "
                 "link trained down" if gpu else "CPU contention or memory bandwidth on the node (its ranks "
                 "exchange through the host)")
        lines = "; ".join(f"{figure} {low.value:.3g} GB/s is {low.ratio:.0%} of the other nodes' median "
                          f"{low.peer_median:.3g}" for figure, low in found)
        findings.append(_node(
            status, host, sev, f"{host}'s collectives within the node are slow: {lines} (likely {cause})",
            "Exclude the node (OUT/exclude.txt) and check the links between its devices: " + cause + ".",
            SanityEvidence(figures=[FigureRow(figure=figure, value=low.value, peer_median=low.peer_median,
                                              peer_mad=low.peer_mad, confidence=low.confidence)
                                    for figure, low in found], likely_cause=cause),
            "intra", confidence=min(low.confidence for _, low in found)))
    return findings


def _collective_failures(records: list[dict[str, Any]], unreachable: bool) -> list[Finding]:
    """One finding for collectives that failed while every node answered (a dead node explains its own)."""
    failed = {r["rank"]: (k, v) for r in records for k, v in r.get("errors", {}).items()
              if k not in DEVICE_FIGURES}
    if not failed or unreachable:
        return []
    first = next(iter(failed.values()))
    return [Finding(ANALYZER, Severity.CRITICAL, f"the collectives failed on ranks {sorted(failed)} while every node "
                    f"answered: {first[0]}: {first[1][:160]}", "Read the launcher's logs of these ranks; check the "
                    "network between the nodes (firewall, interface selection: GLOO_SOCKET_IFNAME / "
                    "NCCL_SOCKET_IFNAME).",
                    evidence=SanityEvidence(errors={str(r): list(v) for r, v in failed.items()}),
                    ranks=tuple(sorted(failed)), key="collectives-failed")]


def _lint(nodes: Mapping[str, Mapping[str, Any]]) -> Iterator[Finding]:
    """The NCCL setting lint's findings of every node, one finding per title, naming every node that has it."""
    merged: dict[str, tuple[Finding, list[str]]] = {}
    for host, facts in sorted(nodes.items()):
        for raw in facts.get("lint", []):
            f = Finding.from_dict(raw)
            merged.setdefault(f.title, (f, []))[1].append(host)
    for f, hosts in merged.values():
        yield Finding(f.analyzer, f.severity, f.title + f" (on {len(hosts)} node(s))", f.recommendation,
                      evidence=dict(f.evidence), hosts=tuple(hosts), key=f"lint|{f.id}",
                      confidence=f.confidence)


def cut_short(results: SanityResults) -> list[str]:
    """What the time box cut short, rank by rank ("rank 2: ..."), as the records say."""
    return [f"rank {rank}: {what}" for rank, r in sorted(results.records.items()) for what in r.get("cut", [])]


def _cut_finding(results: SanityResults) -> list[Finding]:
    """One info finding saying what the time box cut (the judgement is of what was measured)."""
    cut = cut_short(results)
    if not cut:
        return []
    return [Finding(ANALYZER, Severity.INFO, f"the time box cut the check short ({len(cut)} cut(s)); judged on what "
                    f"was measured: {'; '.join(cut[:3])}", f"Give a longer --time-box (it was "
                    f"{results.time_box_s:g} s) for every figure in full.", evidence=SanityEvidence(cut=cut[:64]),
                    key="cut-short")]


def _quota_held(records: list[dict[str, Any]], named: set[str], status: dict[str, Severity]) -> list[Finding]:
    """Nodes whose cgroup holds a rank to less than one CPU while their peers have no such quota, unless already
    named on compute (docs/internals/analyzers.md)."""
    findings = []
    for host in dict.fromkeys(r["host"] for r in records):
        if host in named:
            continue
        mine = [r for r in records if r["host"] == host]
        said, facts = cpu_cause(mine, [r for r in records if r["host"] != host])
        quota = facts.get("cpu_quota_cores")
        if not isinstance(quota, (int, float)) or quota >= threshold('sanity.quota_cores_per_rank') * len(mine):
            continue
        findings.append(_node(
            status, host, Severity.WARNING, f"{host} is held back by its cgroup: {said} (its peers have no such quota; "
            f"{len(mine)} rank(s) of the job would share it)", "Remove or raise the node's CPU quota (the container's "
            "or the job's cgroup: cpu.max / cpu.cfs_quota_us) before the job, or exclude the node (exclude-at "
            "warning).", SanityEvidence(ranks=[r["rank"] for r in mine], **facts), "quota",
            ranks=tuple(r["rank"] for r in mine), confidence=0.99))
    return findings
