"""The run-directory format: what collectors write, what users copy around, what `analyze` reads.

Its layout, step records and host counters are described in docs/internals/core.md and, for users, in
docs/formats/run-directory.md. Here: the host name, atomic writes, JSON lines, the manifest and `discover`.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftracker.bounded import LineBlocks, LineStats, iter_lines, load_json_file, loads_json, not_regular
from perftracker.containment import walk
from perftracker.errors import InputError
from perftracker.output_names import DIFF_JSON, FINDINGS, TABLES, TIMELINE

RUNDIR_FORMAT = "perftracker-run"
RUNDIR_VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024

TRACE_SUFFIXES = (".json", ".json.gz")
# Folders of a run directory whose JSON files are not traces.
NON_TRACE_DIRS = {"env", "steps", "counters", "nccl", "stacks", TABLES, "manifests", "output", "requests", "ranks",
                  "fr", "errors", "profiles", "inspector"}
OUTPUT_FILES = {FINDINGS, "store.json", "ground_truth.json", MANIFEST, TIMELINE, DIFF_JSON}


def host_name(explicit: str | None = None) -> str:
    """The name host-keyed files and records use for this machine: `explicit` (a command's --host) when
    given, else $PERFTRACKER_HOST when set (give each node a distinct one where hostnames repeat, as in
    some containers), else the hostname up to its first dot, which is also what NCCL prints and
    substitutes for %h. Called once per process, at its entry point (a command, the in-job hook)."""
    return ((explicit or "").strip() or os.environ.get("PERFTRACKER_HOST", "").strip()
            or socket.gethostname().split(".")[0])


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` so that readers see either the old or the new file, never half of one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line and flush it: a crash loses at most the line being written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        handle.flush()


def read_jsonl(path: Path, stats: LineStats | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON or None when the line is not JSON) for each non-blank line of a JSON
    lines file written by `append_jsonl`; content is parsed, never evaluated. The file is read within
    `perftracker.bounded`'s limits (regular files only, the per-file cap, cut lines), counted in `stats`;
    InputError / OSError when it cannot be opened."""
    blocks = LineBlocks(path)
    if stats is not None:
        blocks.stats = stats
    for lineno, line in iter_lines(blocks):
        if not line.strip():
            continue
        try:
            yield lineno, loads_json(line)
        except ValueError:
            yield lineno, None


def write_manifest(run: Path, **fields: Any) -> Path:
    """Write (or update) the run's manifest, keeping fields already there."""
    path = run / MANIFEST
    data: dict[str, Any] = read_manifest(run) or {}
    data.update(fields)
    data["format"] = RUNDIR_FORMAT
    data["format_version"] = RUNDIR_VERSION
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    return path


def read_manifest(run: Path) -> dict[str, Any] | None:
    """The manifest as a dict, or None when the folder has none (a bare folder of traces)."""
    path = run / MANIFEST
    if not path.is_file():
        return None
    try:
        data = load_json_file(path, MAX_MANIFEST_BYTES)
    except (InputError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def step_file(run: Path, rank: int) -> Path:
    return run / "steps" / f"rank-{rank}.jsonl"


def trace_file(run: Path, rank: int, compressed: bool = True) -> Path:
    return run / "traces" / f"rank-{rank}.pt.trace.json{'.gz' if compressed else ''}"


@dataclass
class Inputs:
    """What `analyze` found under a path: every regular file, in walk order (`collectors/input_kinds.py` says which
    is which); `unreadable` are the entries that are not regular files (FIFOs, devices, sockets, broken
    symlinks), with what each is: never opened. `alone`: the path was one file, not a folder."""

    root: Path
    files: list[Path] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    alone: bool = False
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (path, why it is not read: a sentence)

    @property
    def empty(self) -> bool:
        return not self.files

    def skip_notes(self) -> Iterator[tuple[Path, str]]:
        """(path, message) for every entry not read: the unreadable ones, then the skipped ones."""
        for path, what in self.unreadable:
            yield path, (f"is {what}, not a regular file: not read (perftracker reads only regular files; copy "
                         "the data into a file to use it)")
        yield from self.skipped


SANITY_DIR = "sanity"  # where `perftracker run --sanity` writes the check in a run directory (not an input)


def discover(root: Path, follow_links: bool = False) -> Inputs:
    """Find the inputs under `root` (a run directory, a folder of traces, or one trace file); what is not
    read, and why, is in `Inputs.unreadable` / `Inputs.skipped` (`containment.walk`: nothing from outside
    the folder, no output folder, no hidden file, without a word; a run directory's SANITY_DIR, the check
    `run --sanity` wrote before the job, is left out without a note)."""
    if not root.is_dir() and not_regular(root):
        return Inputs(root=root.parent, unreadable=[(root, not_regular(root))], alone=True)
    if root.is_file():
        return Inputs(root=root.parent, files=[root], alone=True)
    found = Inputs(root=root, manifest=read_manifest(root))
    for entry in walk(root, follow_links):
        path = entry.path
        what = "" if entry.skip else not_regular(path)
        if entry.skip:
            if not (found.manifest is not None and path == root / SANITY_DIR and path.is_dir()):
                found.skipped.append((path, entry.skip))  # (`run --sanity`'s own check is left out unsaid)
        elif what:
            found.unreadable.append((path, what))
        else:
            found.files.append(path)
    return found
