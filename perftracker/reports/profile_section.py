"""Report section "Where each rank spends its time": the sampled stacks (`profile_samples`) side by side.

`profile_section(tables, findings)` is None without profiled ranks; otherwise a heatmap of the frames that differ
most between ranks, each rank's sample count and the `stack_profile` findings.
"""

from __future__ import annotations

from perftracker.analyzers.findings import Finding
from perftracker.reports.charts import profile_figures
from perftracker.reports.sections import Section, Tables, listed, table


def profile_section(tables: Tables, findings: list[Finding]) -> Section | None:
    ranks = table(tables, "profile_ranks")
    if ranks.empty:
        return None
    data = {"rate_hz": int(ranks["rate_hz"].max()), "findings": listed(findings, ("stack_profile",))}
    return Section("profile", "Where each rank spends its time", "section_profile.html.j2", data,
                   profile_figures(ranks, table(tables, "profile_shares")))
