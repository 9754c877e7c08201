"""Find the text files an attached job writes its log lines into, without being told (`--job-log`).

`find_job_outputs(pids)` reads /proc/PID/fd and fdinfo: `files` are the stdout/stderr regular files and the
log-like files held open for writing (each once, by real path); `pipes` are stdout/stderr that are pipes or
terminals, never read (`ours`: those this process reads itself). Files under `exclude` are left out; at most
MAX_FDS descriptors per process.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
MAX_FDS = 4096
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


@dataclass
class OutputFile:
    """A file the job writes: where it was first seen (pid, fd), and every pid holding it open."""

    path: Path
    pid: int
    fd: int
    pids: set[int] = field(default_factory=set)

    @property
    def label(self) -> str:
        what = {1: "stdout", 2: "stderr"}.get(self.fd, f"fd {self.fd}")
        return f"{self.path} ({what} of pid {self.pid})"


@dataclass
class JobOutputs:
    files: list[OutputFile] = field(default_factory=list)
    pipes: list[tuple[int, int, str]] = field(default_factory=list)  # (pid, fd, what it is: pipe:[..], /dev/pts/3)
    ours: list[tuple[int, int, str]] = field(default_factory=list)  # pipes this process reads (`perftracker run`)


def _target(pid: int | str, fd: int) -> str:
    """What descriptor `fd` of `pid` names ("" when it cannot be read)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""


def _open_for_writing(pid: int, fd: int) -> bool:
    """Whether descriptor `fd` of `pid` was opened for writing (the `flags:` line of fdinfo, octal)."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as handle:
            for line in handle.read(4096).splitlines():
                if line.startswith("flags:"):
                    return bool(int(line.split(":", 1)[1].strip() or "0", 8) & _WRITE_FLAGS)
    except (OSError, ValueError):
        return False
    return False


def _fds(pid: int) -> list[int]:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())[:MAX_FDS]


def _under(path: Path, folders: Iterable[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def find_job_outputs(pids: Iterable[int], exclude: Iterable[Path] = ()) -> JobOutputs:
    """See the module docstring."""
    skip = [Path(os.path.realpath(p)) for p in exclude]
    found = JobOutputs()
    own = {t for fd in _fds(os.getpid()) if (t := _target("self", fd)).startswith("pipe:")}  # `perftracker run`'s
    seen: dict[Path, OutputFile] = {}
    for pid in dict.fromkeys(pids):
        for fd in _fds(pid):
            target = _target(pid, fd)
            if not target:
                continue
            if not target.startswith("/") or target.endswith(" (deleted)"):  # pipe:[1], socket:[..], anon_inode:..
                if fd in (1, 2) and target.startswith("pipe:"):
                    (found.ours if target in own else found.pipes).append((pid, fd, target))
                continue
            path = Path(target)
            try:
                info = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                if fd in (1, 2) and stat.S_ISCHR(info.st_mode):
                    found.pipes.append((pid, fd, target))
                continue
            if fd not in (1, 2) and not (path.name.endswith(LOG_SUFFIXES) and _open_for_writing(pid, fd)):
                continue
            real = Path(os.path.realpath(path))
            if real in seen:
                seen[real].pids.add(pid)
            elif not _under(real, skip):
                seen[real] = OutputFile(real, pid, fd, {pid})
                found.files.append(seen[real])
    return found
