"""Inputs stay inside the folder the user named: the walk over an input folder, and what it leaves out.

`walk(root)` yields every regular-file candidate under `root` as `Entry(path, skip)`, `skip` the reason in words
when it is not read: nothing is dropped without a reason. The rules (links, hidden files, output folders,
depth and count caps): docs/internals/core.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from perftracker.bounded import not_regular
from perftracker.output_names import DIFF_JSON, FINDINGS, TABLES

MAX_DEPTH = 64  # no run directory or trace folder comes near; deeper folders are skipped, said
PATH_MAX = 4096  # bytes, Linux's limit: a longer path cannot be opened by name
MAX_ENTRIES = 1_000_000
OUTPUT_MARK = ".perftracker-output"  # written into every output folder (perftracker/output_dir.py)
SKIP_DIRS = {TABLES, ".perftracker-cache", "__pycache__", "incidents"}  # incidents: the watcher's, analyzed apart
SPECIAL_ROOTS = ("/proc", "/sys", "/dev")


@dataclass(frozen=True)
class Entry:
    """A path under the root and why it is not read ("" when it is a file to read)."""

    path: Path
    skip: str = ""


def special_place(path: Path | str) -> str:
    """"/proc", "/sys" or "/dev" when `path` resolves into one of them, else ""."""
    real = os.path.realpath(path)
    return next((top for top in SPECIAL_ROOTS if real == top or real.startswith(top + "/")), "")


def inside(path: Path | str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def is_output_folder(folder: Path, names: set[str]) -> bool:
    """Does a folder holding `names` look like a perftracker output (analyze, diff, report)?"""
    return OUTPUT_MARK in names or DIFF_JSON in names or (FINDINGS in names and TABLES in names)


def _link_skip(path: Path, real_root: str, follow_links: bool, folder: bool) -> str:
    target = os.path.realpath(path)
    if special_place(path) and not inside(path, real_root):
        return f"{not_regular(path) or 'a symlink'} ({target}, in {special_place(path)}): never read"
    if folder:
        where = "inside the input folder (walked where it lies)" if inside(path, real_root) else \
            f"leading outside the input folder, to {target}"
        return f"a symlink to a folder {where}: not followed"
    if not inside(path, real_root) and not follow_links:
        return (f"a symlink leading outside the input folder, to {target}: not read (give --follow-links "
                "to read files that links lead to)")
    return ""


def walk(root: Path, follow_links: bool = False) -> Iterator[Entry]:
    """Every entry under `root` that is a file candidate or a skip (see the module docstring), sorted."""
    real_root = os.path.realpath(root)
    todo: list[tuple[Path, int]] = [(root, 0)]
    yielded = dropped = 0
    while todo:
        folder, depth = todo.pop()
        try:
            with os.scandir(folder) as scan:
                items = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            yield Entry(folder, f"a folder that cannot be listed ({exc.strerror or exc}): not read")
            continue
        names = {e.name for e in items}
        if depth and is_output_folder(folder, names):
            yield Entry(folder, "a perftracker output folder (findings, report, tables): not read as input")
            continue
        subfolders: list[Path] = []
        for item in items:
            path = Path(item.path)
            if yielded >= MAX_ENTRIES:
                dropped += 1
                continue
            yielded += 1
            skip = _skip(item, path, real_root, follow_links, depth)
            if skip is None:
                subfolders.append(path)
            elif skip != "-":
                yield Entry(path, skip)
        todo += [(p, depth + 1) for p in reversed(subfolders)]
    if dropped:
        yield Entry(root, f"{dropped:,} more entries beyond the first {MAX_ENTRIES:,}: not read")


def _skip(item: os.DirEntry[str], path: Path, real_root: str, follow_links: bool, depth: int) -> str | None:
    """"" to read the file, None to walk the folder, "-" to pass by silently (our own folders), else why not."""
    if item.name.startswith("."):
        return "-" if item.name in SKIP_DIRS or item.name == OUTPUT_MARK else \
            "a hidden name (starts with '.'): not read (rename it to read it)"
    if len(os.fsencode(item.path)) >= PATH_MAX:
        return f"a path longer than PATH_MAX ({PATH_MAX} bytes): not read"
    try:
        is_link = item.is_symlink()
        is_dir = item.is_dir(follow_symlinks=False)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if is_dir:
        if item.name in SKIP_DIRS:
            return "-"
        if depth + 1 > MAX_DEPTH:
            return f"a folder nested deeper than {MAX_DEPTH} levels: not read"
        return None
    return _link_skip(path, real_root, follow_links, os.path.isdir(path)) if is_link else ""  # isdir never raises
