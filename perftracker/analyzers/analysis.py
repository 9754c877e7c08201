"""One analysis of one Store: the options it runs under, and every view computed at most once.

An `Analysis` is what each analyzer and each view function receives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from perftracker.analyzers.thresholds import Number, Thresholds
from perftracker.analyzers.thresholds import active as _active
from perftracker.option_checks import boolean, mapping, paths
from perftracker.store import Store

T = TypeVar("T")


@dataclass(frozen=True)
class AnalysisOptions:
    """What the user chose for this analysis. `hta_compat`: use Holistic Trace Analysis' definitions;
    `thresholds`: overrides of declared thresholds by name (`{"straggler.alpha": 0.005}`)."""

    hta_compat: bool = False
    device_files: tuple[Path, ...] = ()  # --devices files (analyzers/efficiency/devices.py format), matched first
    thresholds: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Each value checked as it is given (`perftracker.option_checks`), before anything is loaded."""
        boolean(self.hta_compat, "hta_compat")
        object.__setattr__(self, "device_files", paths(self.device_files, "device_files"))
        Thresholds.with_overrides(mapping(self.thresholds, "thresholds"))


class Analysis:
    """The Store under analysis, its options and the memo of views already computed."""

    def __init__(self, store: Store, options: AnalysisOptions | None = None) -> None:
        self.store = store
        self.options = options or AnalysisOptions()
        self.thresholds = Thresholds.with_overrides(self.options.thresholds)
        self._views: dict[Callable[[Analysis], Any], Any] = {}
        self._failed: dict[Callable[[Analysis], Any], Exception] = {}

    def threshold(self, name: str) -> Number:
        """The value of declared threshold `name` in this analysis (its override, else its default)."""
        return self.thresholds.value(name)

    def active(self) -> AbstractContextManager[None]:
        """While the block runs, `thresholds.threshold()` answers from this analysis' table."""
        return _active(self.thresholds)

    def view(self, fn: Callable[[Analysis], T]) -> T:
        """`fn(self)`, computed once per analysis; later calls return the same object (or raise the same error)."""
        if fn in self._failed:
            raise self._failed[fn]
        if fn not in self._views:
            try:
                with self.active():
                    self._views[fn] = fn(self)
            except Exception as exc:
                self._failed[fn] = exc
                raise
        result: T = self._views[fn]
        return result
