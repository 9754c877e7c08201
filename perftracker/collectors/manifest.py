"""The facts of a run's manifest.json: the numbers analyzers read, and which inputs were made up.

Promise: `checked_manifest(manifest)` drops `world_size` (1 .. MAX_RANK + 1) and `exit_code` (an int32) when they
are anything else (a 10**12 world size would make an analyzer enumerate a trillion ranks), with a warning each;
`synthetic_inputs(manifest)` returns one `SyntheticInput` per input its `synthetic` entry names, and a warning
for every entry it cannot read. The entry's shapes: docs/internals/collectors.md.
"""

from __future__ import annotations

from typing import Any

from perftracker.rundir import MANIFEST
from perftracker.store import LoadNote, SyntheticInput
from perftracker.values import MAX_RANK, int_in

EVERY_INPUT = "."
_DEFAULT_WHAT = "made up, not collected"


def checked_manifest(manifest: dict[str, Any]) -> tuple[dict[str, Any], list[LoadNote]]:
    """The manifest with the numbers analyzers read (world_size, exit_code) kept only when in range."""
    checked = dict(manifest)
    notes = []
    for key, lo, hi in (("world_size", 1, MAX_RANK + 1), ("exit_code", -(2**31), 2**31 - 1)):
        if key in checked and checked[key] is not None and int_in(checked[key], lo, hi) is None:
            notes.append(LoadNote("warning", "manifest.json", f"'{key}' is {str(checked.pop(key))[:40]!r}, not a "
                                  f"number from {lo} to {hi}; ignored"))
    return checked, notes


def synthetic_inputs(manifest: dict[str, Any]) -> tuple[list[SyntheticInput], list[LoadNote]]:
    raw = manifest.get("synthetic")
    if raw is None or raw is False:
        return [], []
    author = str(manifest.get("created_by") or manifest.get("generated_by") or "")
    if raw is True or (isinstance(raw, str) and raw.strip().lower() == "all"):
        return [SyntheticInput(EVERY_INPUT, author, "every input of the run is " + _DEFAULT_WHAT)], []
    entries = raw if isinstance(raw, list) else [raw]
    found: list[SyntheticInput] = []
    notes: list[LoadNote] = []
    for i, entry in enumerate(entries):
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path.strip():
            notes.append(LoadNote("warning", MANIFEST,
                                  f"'synthetic' entry {i + 1} is not an object with a 'path' ({str(entry)[:80]!r}); "
                                  "it is ignored: write {\"path\": ..., \"made_by\": ..., \"what\": ...}"))
            continue
        assert isinstance(entry, dict)
        found.append(SyntheticInput(path.strip(), str(entry.get("made_by") or author),
                                    str(entry.get("what") or _DEFAULT_WHAT)))
    return found, notes
