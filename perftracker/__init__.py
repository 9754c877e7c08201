"""perftracker: name the cause of a slow or stuck distributed training job, with evidence.

The package promises one flow: collectors write (or read) artifacts, loaders build a Store of typed
tables, analyzers turn the Store into Findings, reports render Store + Findings.

The Python API (`perftracker/api.py`) is exported here, imported on first use so that `import perftracker`
stays cheap: `perftracker.analyze(path) -> Run`, `perftracker.diff(base, new) -> RunDiff`,
`perftracker.load(path) -> Store`, `perftracker.read(out) -> Run`, `perftracker.timeline(path)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perftracker._version import __version__

# the one list of public names (perftracker/api.py keeps no second one)
_API = ("analyze", "analyze_jobs", "analyze_store", "diff", "load", "load_options", "read", "timeline",
        "save_timeline", "Run", "RunDiff", "AnalysisOptions", "LoadOptions", "LoadKeywords")

if TYPE_CHECKING:
    from perftracker.api import (  # noqa: F401
        AnalysisOptions,
        LoadKeywords,
        LoadOptions,
        Run,
        RunDiff,
        analyze,
        analyze_jobs,
        analyze_store,
        diff,
        load,
        load_options,
        read,
        save_timeline,
        timeline,
    )

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    """The API's names, imported from `perftracker.api` when first asked for."""
    if name in _API:
        from perftracker import api

        return getattr(api, name)
    raise AttributeError(f"module 'perftracker' has no attribute {name!r}")
