"""What `perftracker sanity` writes into OUT (rank 0 only).

Promise: `write_outputs(out, results, verdict)` writes, each atomically:
sanity.json (every rank's record: what the judgement read, re-judgeable), findings.json (the usual document),
report.html (findings and the per-device table, slow ones first), tables/sanity_devices.parquet (the whole
table), exclude.txt (one host per line to exclude; empty when none), slurm_exclude.txt (`--exclude=h1,h2`, or
empty), hostfile (the good nodes, one per line, with `slots=<ranks it ran>` as Open MPI / DeepSpeed read it).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from perftracker.analyzers.sanity.judge import SanityVerdict
from perftracker.analyzers.sanity.results import SanityResults
from perftracker.analyzers.sanity.table import FIGURE_LABELS
from perftracker.reports import json_report
from perftracker.reports.sanity_section import sanity_section
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


def write_outputs(out: Path, results: SanityResults, verdict: SanityVerdict) -> None:
    """See the module docstring."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    atomic_write_text(out / "sanity.json", json.dumps(results.to_dict(), separators=(",", ":")) + "\n")  # C encoder: fast
    summary = {"command": "sanity", "nodes": len(dict.fromkeys(results.hosts)), "ranks": len(results.hosts),
               "exclude": verdict.exclude, "keep": verdict.keep, "node_status": verdict.node_status,
               "elapsed_s": results.elapsed_s, "time_box_s": results.time_box_s}
    json_report.write(out / "findings.json", json_report.build(verdict.findings, [], "sanity", summary))
    pd.DataFrame(verdict.rows).to_parquet(out / "tables" / "sanity_devices.parquet", index=False)
    section = sanity_section(verdict.rows, FIGURE_LABELS, _note(results))
    synthetic = [{"path": ".", "what": results.synthetic, "made_by": ""}] if results.synthetic else None
    from perftracker.reports import html  # plotly and Jinja only when a page is rendered

    html.render(out / "report.html", verdict.findings, [], [section], title="perftracker sanity check",
                synthetic=synthetic)
    atomic_write_text(out / "exclude.txt", "".join(f"{h}\n" for h in verdict.exclude))
    atomic_write_text(out / "slurm_exclude.txt", f"--exclude={','.join(verdict.exclude)}\n" if verdict.exclude else "")
    slots = Counter(results.hosts)
    atomic_write_text(out / "hostfile", "".join(f"{h} slots={slots[h]}\n" for h in verdict.keep))
