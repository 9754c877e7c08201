"""Outputs only where asked: one writer per output folder, and no write that follows a link planted in it.

Promise:
- `claimed(out_dir)` holds the folder for one command: it creates it, opens its mark file `OUTPUT_MARK`
  (no-follow: a link planted there is refused) and takes an exclusive, non-blocking lock on it; a second
  perftracker writing into the same folder at the same time gets an `OutputError` at once ("another
  perftracker command is writing into this folder"), never a mix of two runs' files. Re-entrant within a
  process. A folder it created is removed again when the command fails before writing anything. The mark also tells `containment.walk` that the folder is output, never input. A folder that is
  a symlink inside another output folder (a planted `base` or `new` of a diff) is refused.
- `replace_tables(tables, folder)` writes every table into a new hidden folder beside `folder`, then swaps
  it in: a `tables` symlink (or file) planted in the output folder is removed, never followed or written
  through, and tables of an earlier run that this run does not write do not stay behind.
- `remove_stale(path)` removes a file of an earlier run that this run does not write (unlinks, never
  follows), so a report never links another run's file as this run's.
Every other output file is written by `rundir.atomic_write_*` (a new file renamed over the name: a link
planted under that name is replaced, its target untouched).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from perftracker.containment import OUTPUT_MARK
from perftracker.errors import OutputError, output_error

_HELD: dict[str, int] = {}


@contextmanager
def claimed(out_dir: Path, option: str = "-o") -> Iterator[None]:
    """Hold `out_dir` for this command (see the module docstring); OutputError when it cannot be."""
    key = os.path.abspath(out_dir)
    if key in _HELD:
        yield
        return
    if out_dir.is_symlink() and (out_dir.parent / OUTPUT_MARK).exists():
        raise OutputError("is a symlink inside a perftracker output folder (planted there?)", str(out_dir),
                          "remove the link, or give another folder")
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir / OUTPUT_MARK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise output_error(out_dir, exc, option) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputError("another perftracker command is writing into this folder", str(out_dir),
                          f"wait for it to finish, or give another folder{' with ' + option if option else ''}"
                          ) from None
    _HELD[key] = fd
    try:
        yield
    except BaseException:
        if created and [p.name for p in out_dir.iterdir()] == [OUTPUT_MARK]:  # nothing written: leave nothing
            (out_dir / OUTPUT_MARK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    finally:
        del _HELD[key]
        os.close(fd)


def _remove_entry(path: Path) -> None:
    """Remove a link or file at `path` (never its target), or a folder."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def replace_tables(tables: Mapping[str, pd.DataFrame], folder: Path) -> None:
    """Write each table as `<name>.parquet` into a new folder, then swap it in as `folder` (see the module
    docstring). OSError when it cannot be written; nothing half-written is left."""
    stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        os.chmod(stage, 0o755)
        for name, frame in tables.items():
            frame.reset_index(drop=True).to_parquet(stage / f"{name}.parquet", index=False)
        old = None
        if os.path.lexists(folder):
            if folder.is_symlink() or not folder.is_dir():
                folder.unlink()
            else:
                old = folder.parent / f".{folder.name}.old.{uuid.uuid4().hex[:8]}"
                os.rename(folder, old)
        os.rename(stage, folder)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def remove_stale(path: Path) -> None:
    """Remove `path` (a file or link of an earlier run), if there: never followed."""
    if os.path.lexists(path):
        _remove_entry(path)
