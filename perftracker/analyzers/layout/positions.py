"""The post-pass that says where each rank a finding names sits in the job's layout."""

from __future__ import annotations

from dataclasses import replace

from perftracker.analyzers.findings import Finding
from perftracker.analyzers.layout.model import Layout

MAX_LISTED = 16


def with_positions(findings: list[Finding], layout: Layout) -> list[Finding]:
    """The findings with each named rank's place in the layout in their evidence."""
    if not layout.known:
        return findings
    out = []
    for f in findings:
        ranks = [r for r in f.ranks if r in layout.coords and layout.coords[r]]
        if not ranks or "position" in f.evidence or "positions" in f.evidence:
            out.append(f)
            continue
        extra: dict[str, object] = ({"position": layout.where(ranks[0])} if len(f.ranks) == 1 else
                                    {"positions": [layout.where(r) for r in ranks[:MAX_LISTED]]})
        out.append(replace(f, evidence={**f.evidence, **extra}))
    return out
