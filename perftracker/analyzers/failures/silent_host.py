"""A node that died: it went silent while the others went on, and the others' errors are about losing it."""

from __future__ import annotations

import re

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.common import clock_utc, rank_list
from perftracker.analyzers.failures.waitsources import LOST_CONNECTION
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.thresholds import threshold
from perftracker.evidence.failures import SilentHostEvidence

_LOST_PEER = re.compile(LOST_CONNECTION + "|remote worker", re.IGNORECASE)
_FAILED = ("exception", "exit", "timeout", "gloo_timeout")


def _addresses(analysis: Analysis, host: str) -> set[str]:
    ifaces = analysis.store["net_ifaces"]
    mine = ifaces[ifaces["host"] == host]
    return {a for text in mine["addresses"] for a in str(text).split(",") if a}


def _ranks_of(analysis: Analysis, host: str) -> list[int]:
    store = analysis.store
    ranks = {int(r) for r, h in store.run_info.step_hosts.items() if h == host}
    ranks |= {int(r) for r, h in zip(store.ranks["rank"], store.ranks["host"]) if str(h) == host}
    env = store["config"]
    ranks |= {int(r) for r, h in zip(env["rank"], env["host"]) if str(h) == host and int(r) >= 0}
    return sorted(ranks)


def analyze_silent_host(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    net, failures = store["netdev"], store["failures"]
    if net.empty or failures.empty:
        return []
    failed = failures[failures["kind"].isin(_FAILED)]
    if failed.empty:
        return []
    last = net.groupby("host", observed=True)["ts_ns"].max()
    if len(last) < 2:
        return []
    findings = []
    for host, seen in last.items():
        others = last.drop(index=host)
        gap_s = (int(others.max()) - int(seen)) / 1e9
        if gap_s < threshold("silent_host.gap_s"):
            continue
        host = str(host)
        ranks = _ranks_of(analysis, host)
        own_errors = failed[failed["rank"].isin(ranks) & (failed["kind"] == "exception")] if ranks else failed[:0]
        addresses = _addresses(analysis, host)
        naming = failed[[any(a in str(m) for a in addresses) for m in failed["message"]]]
        lost = failed[failed["message"].astype(str).str.contains(_LOST_PEER)]
        blamed = sorted({int(r) for r in pd.concat([naming, lost])["rank"] if int(r) >= 0 and int(r) not in ranks})
        on_it = f" ranks {rank_list(ranks)} on it" if ranks else ""
        silent = ("; none of them reported an error of its own" if ranks and own_errors.empty else "")
        cited = sorted(a for a in addresses if any(a in str(m) for m in naming["message"]))
        named = f" naming its address {', '.join(cited)}" if cited else ""
        after = (f"; ranks {rank_list(blamed)} then failed with lost-connection errors{named}" if blamed else "")
        findings.append(Finding(
            analyzer="silent_host", severity=Severity.CRITICAL,
            title=(f"Host {host} went silent at {clock_utc(int(seen))} (its last interface sample; the other hosts "
                   f"reported for {gap_s:.0f} s more):{on_it or ' it'} stopped{silent}{after}"),
            recommendation=(f"Look at {host} first: it (or every process of the job on it) died without a word, "
                            "which is what a node lost to a kernel panic, a power or network failure, the OOM "
                            "killer or a preemption looks like. Check its kernel log and the scheduler's record of "
                            "it; the other ranks' errors are consequences."),
            evidence=SilentHostEvidence(
                host=host, last_sample_ns=int(seen), others_last_sample_ns=int(others.max()), gap_s=round(gap_s, 3),
                ranks=ranks, own_errors=int(len(own_errors)), addresses=sorted(addresses),
                errors_naming_it=int(len(naming)), consequent_ranks=blamed),
            ranks=tuple(ranks), hosts=(host,), key=f"silent_host:{host}"))
    return findings
