"""Outputs only where asked: one writer per output folder, no write that follows a link planted in it, and
nothing removed or replaced that perftracker did not write.

`claimed(out_dir)` holds the folder for one command (its mark file, a lock, a manifest of what it wrote);
`replace_tables` and `remove_stale` act only on what the manifest lists. The rules: docs/internals/core.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from perftracker.containment import OUTPUT_MARK, is_output_folder
from perftracker.errors import OutputError, output_error
from perftracker.output_names import DIFF_HTML, DIFF_JSON, FINDINGS, REPORT, TABLES, TIMELINE

# The names perftracker writes into an output folder: a mark without a manifest (written before there was
# one) owns these, and only these.
OWN_NAMES = frozenset({FINDINGS, REPORT, TIMELINE, DIFF_JSON, DIFF_HTML})
MAX_MARK_BYTES = 1 << 20


class Claim:
    """A folder held by this command: what its manifest says perftracker wrote there, and what it writes now.
    `files` the relative posix paths perftracker wrote; `legacy` a mark without a manifest (perftracker's own
    names are its); `made_from` what the analysis written here was made from (its input)."""

    def __init__(self, folder: Path, fd: int, files: set[str], legacy: bool, made_from: str, command: str) -> None:
        self.folder, self.fd, self.files, self.legacy = folder, fd, files, legacy
        self.made_from, self.command = made_from, command

    def owns(self, rel: str) -> bool:
        if rel in self.files:
            return True
        return self.legacy and (rel in OWN_NAMES or (rel.startswith(f"{TABLES}/") and rel.endswith(".parquet")))

    def check(self, *rels: str) -> None:
        """OutputError when one of `rels` is there, is not a link and is not perftracker's: it is never replaced."""
        for rel in rels:
            path = self.folder / rel
            if os.path.lexists(path) and not path.is_symlink() and not self.owns(rel):
                raise OutputError(f"holds {rel}, which perftracker did not write (its mark does not list it); "
                                  "perftracker never replaces such a file", str(self.folder),
                                  f"move {rel} away, or give another folder")

    def wrote(self, rel: str) -> None:
        self.files.add(rel)
        self.save()

    def save(self) -> None:
        """Rewrite the mark with the manifest (through the open, locked descriptor: never a link)."""
        self.legacy = False
        data = json.dumps({"perftracker_output": 1, "made_from": self.made_from, "command": self.command,
                           "files": sorted(self.files)}, indent=1).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)


def read_manifest(fd: int) -> tuple[set[str], bool, str, str]:
    """(files, legacy, made_from, command) of an open mark file; a mark that is empty or not a manifest is
    one written before the manifest (legacy)."""
    raw = os.pread(fd, MAX_MARK_BYTES, 0)
    try:
        doc = json.loads(raw) if raw.strip() else None
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        return set(), True, "", ""
    files = {str(f) for f in doc["files"] if isinstance(f, str) and ".." not in f.split("/") and not f.startswith("/")}
    return files, False, str(doc.get("made_from") or ""), str(doc.get("command") or "")


def made_from(folder: Path) -> str:
    """What the analysis in output folder `folder` was made from, as its mark says ("" when it does not say)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder / OUTPUT_MARK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            return read_manifest(fd)[2]
        finally:
            os.close(fd)
    return ""


_HELD: dict[str, Claim] = {}


def _listed(names: list[str], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def refuse_foreign(out_dir: Path, option: str) -> None:
    """OutputError when `out_dir` is a symlink, or an existing folder without the mark that holds anything."""
    if out_dir.is_symlink():
        if (out_dir.parent / OUTPUT_MARK).exists():
            raise OutputError("is a symlink inside a perftracker output folder (planted there?)", str(out_dir),
                              "remove the link, or give another folder")
        raise OutputError(f"is a symbolic link (to {os.readlink(out_dir)}): perftracker does not write through "
                          "a link into a folder it did not make", str(out_dir),
                          f"give the folder itself{' with ' + option if option else ''}, or a new folder")
    if out_dir.is_dir() and not os.path.lexists(out_dir / OUTPUT_MARK):
        names = sorted(os.listdir(out_dir))
        if names and not is_output_folder(out_dir, set(names)):  # an output of a version before the mark: ours
            raise OutputError(f"is not a perftracker output folder and is not empty (it holds {_listed(names)}): "
                              "perftracker writes only into a new or empty folder, or one it wrote before", str(out_dir),
                              f"give a new or empty folder{' with ' + option if option else ''}")


@contextmanager
def claimed(out_dir: Path, option: str = "-o") -> Iterator[Claim]:
    """Hold `out_dir` for this command (see the module docstring); OutputError when it cannot be."""
    key = os.path.abspath(out_dir)
    if key in _HELD:
        yield _HELD[key]
        return
    refuse_foreign(out_dir, option)
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
    try:
        files, legacy, source, command = read_manifest(fd)
    except OSError as exc:
        os.close(fd)
        raise output_error(out_dir, exc, option) from None
    claim = _HELD[key] = Claim(out_dir, fd, files, legacy and not created, source, command)
    try:
        yield claim
    except BaseException:
        if created and [p.name for p in out_dir.iterdir()] == [OUTPUT_MARK]:  # nothing written: leave nothing
            (out_dir / OUTPUT_MARK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    finally:
        del _HELD[key]
        os.close(fd)


def _foreign_tables(folder: Path, claim: Claim | None) -> list[str]:
    """The entries of an existing `tables/` folder perftracker did not write (links aside: they hold nothing)."""
    if claim is None or folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(e.name for e in os.scandir(folder) if not e.is_symlink() and not claim.owns(f"{folder.name}/{e.name}"))


def replace_tables(tables: Mapping[str, pd.DataFrame], folder: Path, claim: Claim | None = None) -> None:
    """Write each table as `<name>.parquet` into a new folder, then swap it in as `folder` (see the module
    docstring). OSError when it cannot be written; OutputError when `folder` holds a file perftracker did not
    write (nothing is written then); nothing half-written is left."""
    foreign = _foreign_tables(folder, claim)
    if foreign:
        raise OutputError(f"holds files perftracker did not write ({_listed(foreign)}); perftracker would replace the "
                          "folder and never removes them", str(folder), "move them away, or give another folder")
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
    if claim is not None:
        claim.files = {f for f in claim.files if not f.startswith(f"{folder.name}/")}
        claim.files |= {f"{folder.name}/{name}.parquet" for name in tables}
        claim.save()


def remove_stale(path: Path, claim: Claim | None = None) -> None:
    """Remove `path` (a file or link of an earlier run), if there and perftracker's: never followed."""
    if not os.path.lexists(path):
        return
    if claim is not None and not path.is_symlink() and not claim.owns(path.name):
        return  # not perftracker's: kept
    if path.is_symlink() or not path.is_dir():  # a link or a file (never its target), or a folder
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
    if claim is not None:
        claim.files.discard(path.name)
        claim.save()
