"""The analyze pipeline: load -> analyze -> write findings.json, report tables and report.html.

`perftracker analyze` and `perftracker demo` call `analyze_path`; `perftracker report` calls
`render_report` on an output folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perftracker.analyzers.analysis import Analysis, AnalysisOptions
from perftracker.analyzers.coverage import coverage, coverage_dict, known_hosts, known_ranks
from perftracker.analyzers.findings import Finding, rank_findings
from perftracker.analyzers.registry import run_analyzers
from perftracker.analyzers.rootcause import link_findings
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.reports import html as html_report
from perftracker.reports import json_report, report_data
from perftracker.reports.sections import ReportSection, SectionBuilder
from perftracker.rundir import atomic_write_text
from perftracker.store import LoadNote, Store

FINDINGS = "findings.json"
REPORT = "report.html"
TABLES = "tables"


@dataclass
class AnalysisResult:
    store: Store
    findings: list[Finding]
    out_dir: Path
    document: dict[str, Any]

    @property
    def report_path(self) -> Path:
        return self.out_dir / REPORT


def extra_section_builders() -> list[SectionBuilder]:
    """Sections contributed by other capabilities (NCCL configuration, ...)."""
    builders: list[SectionBuilder] = []
    try:
        from perftracker.reports.nccl_section import nccl_section
    except ImportError:
        return builders
    builders.append(nccl_section)
    from perftracker.reports.health_sections import gpu_section, rdma_section
    from perftracker.reports.profile_section import profile_section

    builders.extend([rdma_section, gpu_section, profile_section])
    return builders


def analyze_path(path: Path, out_dir: Path, options: LoadOptions, hta_compat: bool = False) -> AnalysisResult:
    return analyze_store(load_path(path, options), path, out_dir, hta_compat=hta_compat)


def analyze_store(store: Store, path: Path, out_dir: Path, hta_compat: bool = False) -> AnalysisResult:
    """Analyze one loaded Store (one job) and write its outputs into `out_dir`."""
    analysis = Analysis(store, AnalysisOptions(hta_compat=hta_compat))
    findings = rank_findings(link_findings(store, run_analyzers(analysis)))
    tables = report_data.build(analysis)
    out_dir.mkdir(parents=True, exist_ok=True)
    report_data.save(tables, out_dir / TABLES)
    summary = _summary(analysis, tables)
    document = json_report.build(findings, store.notes, str(path), summary)
    json_report.write(out_dir / FINDINGS, document)
    sections = html_report.core_sections(tables, findings)
    for builder in extra_section_builders():
        section = builder(store, findings)
        if section is not None:
            sections.append(section)
    _save_sections(sections, out_dir / TABLES)
    html_report.render(out_dir / REPORT, findings, store.notes, sections, title=str(path),
                       coverage=summary["coverage"])
    return AnalysisResult(store, findings, out_dir, document)


def _summary(analysis: Analysis, tables: dict[str, Any]) -> dict[str, Any]:
    store = analysis.store
    stats = tables["step_stats"]
    return {
        "ranks": len(known_ranks(store)), "hosts": known_hosts(store),
        "coverage": coverage_dict(coverage(store)),
        "step_time_s": float(stats["median_s"].median()) if not stats.empty else None,
        "hta_compat": analysis.options.hta_compat,
    }


def _save_sections(sections: list[ReportSection], folder: Path) -> None:
    """Extra sections are saved as rendered so `report` can re-render without the inputs."""
    import json

    extra = [s for s in sections if s.key not in {"breakdown", "overlap", "steps", "stragglers", "timeline"}]
    payload = [{"key": s.key, "title": s.title, "html": s.html, "figures": s.figures} for s in extra]
    from plotly.utils import PlotlyJSONEncoder

    atomic_write_text(folder / "sections.json", json.dumps(payload, cls=PlotlyJSONEncoder))


def render_report(out_dir: Path) -> Path:
    """Re-render report.html from an output folder's findings.json and tables/."""
    import json

    document, findings = json_report.read(out_dir / FINDINGS)
    tables = report_data.load(out_dir / TABLES)
    sections = html_report.core_sections(tables, findings)
    extra = out_dir / TABLES / "sections.json"
    if extra.exists():
        for raw in json.loads(extra.read_text(encoding="utf-8")):
            sections.append(ReportSection(raw["key"], raw["title"], raw["html"], raw["figures"]))
    notes = [LoadNote.from_dict(n) for n in document.get("notes", [])]
    html_report.render(out_dir / REPORT, findings, notes, sections, title=str(document.get("input", out_dir)),
                       coverage=(document.get("summary") or {}).get("coverage"))
    return out_dir / REPORT
