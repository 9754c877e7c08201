"""Evidence records more than one finding kind carries: a test's significance, and what the finding passes add
to any finding (its replayed cost, its root-cause chain, the findings folded into it)."""

from __future__ import annotations

from typing import TypedDict

from perftracker.evidence.units import Ms, S, Timestamp

# The statistical test behind a claim: which test, its p-values and the confidence the finding states.
Significance = TypedDict("Significance", {
    "test": str, "tests": int, "trials": int, "world": int, "alpha": float, "confidence": float, "z": float,
    "p_family": float, "p_corrected": float, "sustained": bool, "times_slowest": int, "chance_times_slowest": float,
    "effect_ms": Ms, "others_spread_ms": Ms, "others_spread": float, "autocorrelation": float,
    "step_autocorrelation": float, "design_effect": float,
}, total=False)

# One link of a root-cause chain (`rootcause.chains`): a finding and how it relates to the next.
ChainLink = TypedDict("ChainLink", {
    "id": str, "analyzer": str, "severity": str, "title": str, "relation": str, "explains": bool, "why": str,
}, total=False)

# Where a root cause sits: its host, GPU, NICs and NUMA node, and which input said each.
Location = TypedDict("Location", {
    "rank": int, "host": str, "gpu": int, "pci_bus_id": str, "numa_node": int, "nics": list[str],
    "sources": dict[str, str],
}, total=False)

RootCause = TypedDict("RootCause", {
    "summary": str, "locus": str, "chain": list[ChainLink], "location": Location, "window_ns": list[Timestamp] | None,
}, total=False)

# A finding folded into another as its consequence.
Folded = TypedDict("Folded", {"id": str, "analyzer": str, "title": str})

# What the finding passes add to a finding of any kind (`position(s)`: its ranks' places, `layout.views.with_positions`).
PassEvidence = TypedDict("PassEvidence", {
    "cost_source": str, "estimate_s": S, "replay_error": float, "what_if": str, "cost_note": str,
    "root_cause": RootCause, "folded": list[Folded], "position": str, "positions": list[str],
}, total=False)
