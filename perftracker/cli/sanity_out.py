"""What `perftracker sanity` writes into OUT (the one writer only: cli/sanity.py).

`scheduler_files` makes exclude.txt, slurm_exclude.txt and hostfile from the judgement; `write_outputs` writes
the table, sanity.json, report.html, those files and, last, findings.json, each atomically.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from perftracker.analyzers.sanity.judge import SanityVerdict, cut_short
from perftracker.analyzers.sanity.results import SanityResults
from perftracker.analyzers.sanity.table import FIGURE_LABELS
from perftracker.api import writing
from perftracker.output_dir import replace_tables
from perftracker.reports import json_report
from perftracker.reports.sections import sanity_section
from perftracker.rundir import atomic_write_text


def _note(results: SanityResults) -> str:
    records = list(results.records.values())
    parts = [f"{len(dict.fromkeys(results.hosts))} nodes, {len(results.hosts)} ranks; checked in "
             f"{results.elapsed_s:.1f} s (time box {results.time_box_s:g} s)."]
    for key in ("allreduce_busbw_gbps", "allgather_busbw_gbps", "allreduce_lat_us", "node_allreduce_busbw_gbps",
                "inter_allreduce_busbw_gbps", "inter_allreduce_lat_us"):
        values = sorted(float(r["figures"][key]) for r in records if key in r.get("figures", {}))
        if values:
            parts.append(f"{FIGURE_LABELS[key]}: {values[len(values) // 2]:.3g} (median over ranks).")
    if results.synthetic:
        parts.append(f"SYNTHETIC figures: {results.synthetic}.")
    return " ".join(parts)


def scheduler_files(verdict: SanityVerdict, hosts: list[str]) -> dict[str, str]:
    """See the module docstring: file name -> text."""
    slots = Counter(hosts)
    return {"exclude.txt": "".join(f"{h}\n" for h in verdict.exclude),
            "slurm_exclude.txt": f"--exclude={','.join(verdict.exclude)}\n" if verdict.exclude else "",
            "hostfile": "".join(f"{h} slots={slots[h]}\n" for h in verdict.keep)}


def _atomic(path: Path, text: str) -> None:
    with writing(path):
        atomic_write_text(path, text)


def write_outputs(out: Path, results: SanityResults, verdict: SanityVerdict) -> None:
    """See the module docstring."""
    findings_file = out / "findings.json"
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        findings_file.unlink(missing_ok=True)  # an earlier check's verdict never stands beside this one's files
    with writing(out / "tables"):
        replace_tables({"sanity_devices": pd.DataFrame(verdict.rows)}, out / "tables")
    _atomic(out / "sanity.json", json.dumps(results.to_dict(), separators=(",", ":")) + "\n")  # C encoder: fast
    summary = {"command": "sanity", "nodes": len(dict.fromkeys(results.hosts)), "ranks": len(results.hosts),
               "exclude": verdict.exclude, "keep": verdict.keep, "node_status": verdict.node_status,
               "elapsed_s": results.elapsed_s, "time_box_s": results.time_box_s, "cut": cut_short(results)}
    section = sanity_section(verdict.rows, FIGURE_LABELS, _note(results))
    synthetic = [{"path": ".", "what": results.synthetic, "made_by": ""}] if results.synthetic else None
    from perftracker.reports import html  # plotly and Jinja only when a page is rendered

    with writing(out / "report.html"):
        html.render(out / "report.html", verdict.findings, [], [section], title="perftracker sanity check",
                    synthetic=synthetic)
    for name, text in scheduler_files(verdict, results.hosts).items():
        _atomic(out / name, text)
    with writing(findings_file):
        json_report.write(findings_file, json_report.build(verdict.findings, [], "sanity", summary))
