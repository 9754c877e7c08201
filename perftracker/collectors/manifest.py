"""The facts of a run's manifest.json that analyzers read, kept only when they are in range.

Promise: `checked_manifest(manifest)` returns the manifest with `world_size` (1 .. MAX_RANK + 1) and
`exit_code` (an int32) dropped when they are anything else (a 10**12 world size would make an analyzer
enumerate a trillion ranks), and a warning note for each one dropped. Everything else is kept as read.
"""

from __future__ import annotations

from typing import Any

from perftracker.store import LoadNote
from perftracker.values import MAX_RANK, int_in


def checked_manifest(manifest: dict[str, Any]) -> tuple[dict[str, Any], list[LoadNote]]:
    """The manifest with the numbers analyzers read (world_size, exit_code) kept only when in range."""
    checked = dict(manifest)
    notes = []
    for key, lo, hi in (("world_size", 1, MAX_RANK + 1), ("exit_code", -(2**31), 2**31 - 1)):
        if key in checked and checked[key] is not None and int_in(checked[key], lo, hi) is None:
            notes.append(LoadNote("warning", "manifest.json", f"'{key}' is {str(checked.pop(key))[:40]!r}, not a "
                                  f"number from {lo} to {hi}; ignored"))
    return checked, notes
