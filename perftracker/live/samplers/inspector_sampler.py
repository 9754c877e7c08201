"""Follow the NCCL Inspector output of an attached job into the run directory, so `analyze` of the run sees it.

Promise: `InspectorSampler` (name ``inspector``) reads each worker's environment (/proc/PID/environ,
as `live/attach/discovery.py` does) and, for the workers whose NCCL loads the Inspector plugin
(`NCCL_INSPECTOR_ENABLE` a non-zero integer, `NCCL_PROFILER_PLUGIN` set, JSON output: not
`NCCL_INSPECTOR_PROM_DUMP=1`), follows the file the plugin writes for that process:
`<NCCL_INSPECTOR_DUMP_DIR or nccl-inspector-<SLURM_JOBID> or nccl-inspector-unknown-jobid>/<hostname>-pid<pid>.log`,
relative to the worker's working directory (the rule of NCCL's `genDumpDir` and
`inspectorStateDumpJSON`, see collectors/nccl/inspector.py). Every second what was appended is copied,
complete lines only, to `<run>/inspector/<hostname>-pid<pid>.log`; a file is opened only when it is a
regular file; at most `MAX_COPY_BYTES` are copied per file (then one note). When no worker enables the
plugin: one quiet note saying how to. When the plugin writes only at teardown (the dump interval unset
or -1): a note that nothing arrives until the job ends. Never raises into the session.
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from perftracker.live.sampler import LiveContext
from perftracker.values import ascii_int

MAX_COPY_BYTES = 512 * 1024 * 1024
MAX_CHUNK = 8 * 1024 * 1024
ENABLE_HINT = ("NCCL_PROFILER_PLUGIN=/path/to/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 "
               "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000")


def inspector_enabled(env: dict[str, str]) -> bool:
    """Whether NCCL in a process with this environment loads Inspector and writes its JSON lines."""
    enable = ascii_int(env.get("NCCL_INSPECTOR_ENABLE", "").strip() or "0")
    prom = ascii_int(env.get("NCCL_INSPECTOR_PROM_DUMP", "").strip() or "0")
    return bool(env.get("NCCL_PROFILER_PLUGIN")) and bool(enable) and not prom


def inspector_dir(env: dict[str, str]) -> Path:
    """The folder the plugin writes into (NCCL's `genDumpDir`), possibly relative to the process's cwd."""
    explicit = env.get("NCCL_INSPECTOR_DUMP_DIR")
    if explicit is not None:
        return Path(explicit)
    job = ascii_int(env.get("SLURM_JOBID", "").strip())
    return Path(f"nccl-inspector-{job}" if job is not None else "nccl-inspector-unknown-jobid")


def inspector_file(env: dict[str, str], pid: int, cwd: Path, hostname: str) -> Path:
    """The Inspector output file of process `pid` (NCCL's `<dir>/<hostname>-pid<pid>.log`)."""
    folder = inspector_dir(env)
    return (folder if folder.is_absolute() else cwd / folder) / f"{hostname}-pid{pid}.log"


@dataclass
class _Copy:
    source: Path
    target: Path
    offset: int = 0
    copied: int = 0
    full: bool = False

    def pump(self) -> int:
        """Copy the complete lines appended since the last call (bounded); bytes copied."""
        try:
            info = os.stat(self.source)
        except OSError:
            return 0
        if not stat.S_ISREG(info.st_mode) or self.full:
            return 0
        if info.st_size < self.offset:  # the plugin reopened it with mode "w": start over
            self.offset = 0
        if info.st_size == self.offset:
            return 0
        room = MAX_COPY_BYTES - self.copied
        with open(self.source, "rb") as src:
            src.seek(self.offset)
            data = src.read(min(info.st_size - self.offset, MAX_CHUNK, room))
        end = data.rfind(b"\n") + 1  # a line NCCL is still writing waits for the next call
        if end == 0:
            if len(data) >= MAX_CHUNK:  # no line end in 8 MB: not Inspector output; skip it, uncopied
                self.offset += len(data)
            self.full = len(data) >= room
            return 0
        self.target.parent.mkdir(parents=True, exist_ok=True)
        with open(self.target, "ab") as dst:
            dst.write(data[:end])
            dst.flush()
        self.offset += end
        self.copied += end
        self.full = self.copied >= MAX_COPY_BYTES - 1
        return end


@dataclass
class InspectorSampler:
    name: str = "inspector"
    interval_s: float = 1.0
    copies: list[_Copy] = field(default_factory=list)
    copied: int = 0
    told_full: bool = False

    def start(self, ctx: LiveContext) -> None:
        hostname = socket.gethostname()  # NCCL's gethostname(), not shortened, as in its file names
        enabled, teardown_only = 0, 0
        for w in ctx.job.workers:
            try:
                proc = psutil.Process(w.pid)
                env, cwd = proc.environ(), Path(proc.cwd())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if not inspector_enabled(env):
                continue
            enabled += 1
            interval = ascii_int(env.get("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "").strip() or "-1")
            teardown_only += interval is None or interval < 0
            source = inspector_file(env, w.pid, cwd, hostname)
            self.copies.append(_Copy(source, ctx.run_dir / "inspector" / source.name))
        if not enabled:
            ctx.note("NCCL Inspector: not enabled in the job's environment; per-rank collective timings without a "
                     f"profiler come from it: next time launch with {ENABLE_HINT}")
        elif teardown_only:
            ctx.note(f"NCCL Inspector: {teardown_only} rank(s) write its records only when the job tears down its "
                     "communicators (NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS unset or -1): nothing to "
                     "follow until then; set it to e.g. 1000000 to have them every second")

    def sample(self, ctx: LiveContext) -> None:
        for copy in self.copies:
            self.copied += copy.pump()
        if not self.told_full and any(c.full for c in self.copies):
            self.told_full = True
            ctx.note(f"NCCL Inspector: a rank's output reached {MAX_COPY_BYTES >> 20} MiB copied; the rest stays in "
                     "the job's own file (analyze that folder too for the whole run)")

    def stop(self, ctx: LiveContext) -> None:
        self.sample(ctx)

    def status(self) -> str:
        if not self.copies:
            return "not enabled in the job"
        return f"{len(self.copies)} rank file(s), {self.copied / 1e6:.1f} MB copied"
