"""The report's NCCL sections: configuration per host/rank, transports and NICs, a WARN / error summary, and the
NCCL Inspector tables. `nccl_section` is None without a `nccl_summary` row, `inspector_section` without
Inspector records.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perftracker.analyzers.findings import Finding
from perftracker.reports.sections import Section, Tables, grid, table

MAX_ROWS = 64  # rows of each table on the page; the rest is in tables/<view>.parquet, named under the table
TRANSPORT_COLUMNS = ("host", "transport", "network", "nics", "intra")
WARN_COLUMNS = ("host", "pid", "message", "count", "file", "line")
BUSBW_COLUMNS = {"source": "source", "what": "measured", "size_bytes": "bytes", "busbw_gbs": "busbw GB/s",
                 "expected_gbs": "expected GB/s", "share": "share", "bound_by": "bounded by"}
BANDWIDTH_COLUMNS = {"comm_name": "communicator", "comm_size": "ranks", "op": "op", "bytes": "bytes",
                     "collectives": "collectives", "busbw_median_gbs": "busbw median GB/s",
                     "busbw_p10_gbs": "busbw p10 GB/s", "transfer_median_ms": "transfer median ms"}
LATENESS_COLUMNS = {"comm_name": "communicator", "rank": "rank", "host": "host", "collectives": "collectives",
                    "median_lateness_ms": "median lateness ms", "median_exec_ms": "median kernel ms"}


def _config(config: pd.DataFrame, flagged: pd.DataFrame) -> dict[str, Any]:
    """Variables (sorted) and one row per (host, rank): its label and per variable value and highlight."""
    if config.empty:
        return {"variables": [], "rows": [], "more": 0}
    severity = dict(zip(flagged.get("variable", []), flagged.get("severity", [])))
    variables = sorted({str(v) for v in config["variable"]})
    values: dict[tuple[str, int], dict[str, str]] = {}
    for host, rank, var, value in zip(config["host"], config["rank"], config["variable"], config["value"]):
        values.setdefault((str(host), int(rank)), {})[str(var)] = str(value)
    rows = []
    for (host, rank), mine in sorted(values.items()):
        cells = [{"value": mine.get(v), "severity": severity.get(v) if v in mine else None} for v in variables]
        rows.append({"label": f"{host or '(env file)'} / {rank if rank >= 0 else '?'}", "cells": cells})
    return {"variables": variables, "rows": rows[:MAX_ROWS], "more": max(0, len(rows) - MAX_ROWS)}


def nccl_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """The NCCL section, or None when there is no NCCL log and no configuration."""
    summary = table(tables, "nccl_summary")
    if summary.empty:
        return None
    transports = table(tables, "nccl_transports")
    warns = table(tables, "nccl_warns")
    busbw = table(tables, "nccl_busbw")
    data = {
        "profile": str(summary["profile"].iloc[0]),
        "config": _config(table(tables, "nccl_config"), table(tables, "nccl_flagged")),
        "transports": [[str(v) for v in values] for values in
                       zip(*(transports[c].head(MAX_ROWS).tolist() for c in TRANSPORT_COLUMNS))]
        if not transports.empty else [],
        "transports_more": max(0, len(transports) - MAX_ROWS),
        "warn_lines": int(summary["warn_lines"].iloc[0]),
        "warns": [{"where": f"{host}:{pid}", "message": str(message), "count": int(count), "at": f"{file}:{line}"}
                  for host, pid, message, count, file, line in
                  zip(*(warns[c].head(MAX_ROWS).tolist() for c in WARN_COLUMNS))] if not warns.empty else [],
        "warns_more": max(0, len(warns) - MAX_ROWS),
        "failing_links": [f.title for f in findings if f.evidence.get("flag") == "ib_completion_error"],
        "busbw": grid(busbw, BUSBW_COLUMNS, source="nccl_busbw") if not busbw.empty else {"rows": []},
    }
    return Section("nccl", "NCCL", "section_nccl.html.j2", data)


def inspector_section(tables: Tables, findings: list[Finding]) -> Section | None:
    """The NCCL Inspector tables, or None when the run has no Inspector records."""
    bandwidth, lateness = table(tables, "inspector_bandwidth"), table(tables, "inspector_lateness")
    if bandwidth.empty and lateness.empty:
        return None
    data = {"bandwidth": grid(bandwidth, BANDWIDTH_COLUMNS, source="inspector_bandwidth")
            if not bandwidth.empty else {"rows": []},
            "lateness": grid(lateness, LATENESS_COLUMNS, source="inspector_lateness") if not lateness.empty else {"rows": []}}
    return Section("inspector", "NCCL collectives (Inspector)", "section_inspector.html.j2", data)
