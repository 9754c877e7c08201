"""perftracker: name the cause of a slow or stuck distributed training job, with evidence.

The Python API (`perftracker/api.py`: `analyze`, `diff`, `load`, `read`, `timeline`) is exported here, imported
on first use so that `import perftracker` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perftracker._version import __version__

# the one list of public names (perftracker/api.py keeps no second one), a literal so that type checkers see the
# names exported: a user's `mypy --strict` checks `perftracker.analyze(...)`
__all__ = ["__version__", "analyze", "analyze_jobs", "analyze_store", "diff", "load", "load_options", "read",
           "timeline", "save_timeline", "Run", "RunDiff", "AnalysisOptions", "LoadOptions", "LoadKeywords"]
_API = frozenset(__all__) - {"__version__"}

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


def __getattr__(name: str) -> Any:
    """The API's names, imported from `perftracker.api` when first asked for."""
    if name in _API:
        from perftracker import api

        return getattr(api, name)
    raise AttributeError(f"module 'perftracker' has no attribute {name!r}")
