"""Which inputs of a run directory were made up, from its manifest's `synthetic` entry.

Promise: `synthetic_inputs(manifest)` returns one `SyntheticInput` per input the manifest says is synthetic, and
a warning `LoadNote` for every entry it cannot read. The entry's shapes: docs/internals/collectors.md.
"""

from __future__ import annotations

from typing import Any

from perftracker.rundir import MANIFEST
from perftracker.store import LoadNote, SyntheticInput

EVERY_INPUT = "."
_DEFAULT_WHAT = "made up, not collected"


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
