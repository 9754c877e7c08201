"""The analyzer registry: the list of analyzers `analyze` runs, and the safe way to run them.

An analyzer is a plain function `Store -> list[Finding]`. Analyzers register with `@register`;
third-party analyzers come from the entry-point group `perftracker.analyzers`. A crashing analyzer
becomes a finding of its own, so one bad analyzer never blanks a report.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from perftracker.analyzers.findings import Finding, Severity
from perftracker.store import Store

AnalyzerFn = Callable[[Store], list[Finding]]


@dataclass(frozen=True)
class Analyzer:
    name: str
    fn: AnalyzerFn
    description: str


_REGISTRY: dict[str, Analyzer] = {}


def register(name: str, description: str = "") -> Callable[[AnalyzerFn], AnalyzerFn]:
    """Decorator: add `fn` to the analyzers `analyze` runs, under `name`."""

    def wrap(fn: AnalyzerFn) -> AnalyzerFn:
        _REGISTRY[name] = Analyzer(name, fn, description or (fn.__doc__ or "").strip().splitlines()[0])
        return fn

    return wrap


def _load_builtin() -> None:
    # Importing the modules runs their @register decorators.
    from perftracker.analyzers import builtin  # noqa: F401


def _load_plugins() -> None:
    for entry in metadata.entry_points(group="perftracker.analyzers"):
        try:
            fn = entry.load()
        except Exception as exc:  # a broken plugin must not stop the run
            _REGISTRY[f"plugin:{entry.name}"] = Analyzer(
                f"plugin:{entry.name}", _failing(f"could not import plugin {entry.value}: {exc}"), "broken plugin"
            )
            continue
        _REGISTRY.setdefault(entry.name, Analyzer(entry.name, fn, (fn.__doc__ or entry.name).strip()))


def _failing(message: str) -> AnalyzerFn:
    def fail(store: Store) -> list[Finding]:
        raise RuntimeError(message)

    return fail


def all_analyzers() -> list[Analyzer]:
    """Every registered analyzer (built-in first, then plugins), in registration order."""
    _load_builtin()
    _load_plugins()
    return list(_REGISTRY.values())


def run_analyzers(store: Store, only: list[str] | None = None) -> list[Finding]:
    """Run each analyzer; an exception becomes a warning finding naming the analyzer."""
    findings: list[Finding] = []
    for analyzer in all_analyzers():
        if only and analyzer.name not in only:
            continue
        try:
            findings.extend(analyzer.fn(store))
        except Exception as exc:
            findings.append(
                Finding(
                    analyzer=analyzer.name,
                    severity=Severity.WARNING,
                    title=f"Analyzer '{analyzer.name}' failed: {type(exc).__name__}: {exc}",
                    recommendation="This is a perftracker bug; please report it with the traceback in the evidence. "
                    "The other analyzers ran normally.",
                    evidence={"traceback": traceback.format_exc(limit=6)},
                    key=f"crash:{analyzer.name}",
                )
            )
    return findings
