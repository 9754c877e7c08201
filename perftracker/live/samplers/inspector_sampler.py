"""Follow the NCCL Inspector output of an attached job into the run directory, so `analyze` of the run sees it.

`InspectorSampler` finds, from each worker's environment, the file NCCL's Inspector plugin writes for it and
copies its complete lines every second to `<run>/inspector/<hostname>-pid<pid>.log` (at most MAX_COPY_BYTES
per file). Without the plugin, or when it writes only at teardown, one note says so.
"""

from __future__ import annotations

import socket
from pathlib import Path

import psutil

from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import Copier, Tail
from perftracker.values import ascii_int

MAX_COPY_BYTES = 512 * 1024 * 1024
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


class InspectorSampler(Copier):
    name = "inspector"
    unit = "rank file(s)"
    __slots__ = ("told_full",)

    def __init__(self, interval_s: float = 1.0) -> None:
        super().__init__(interval_s)
        self.told_full = False

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
            self.tails.append(Tail(source, ctx.run_dir / "inspector" / source.name, lines=True, cap=MAX_COPY_BYTES))
        if not enabled:
            ctx.note("NCCL Inspector: not enabled in the job's environment; per-rank collective timings without a "
                     f"profiler come from it: next time launch with {ENABLE_HINT}")
        elif teardown_only:
            ctx.note(f"NCCL Inspector: {teardown_only} rank(s) write its records only when the job tears down its "
                     "communicators (NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS unset or -1): nothing to "
                     "follow until then; set it to e.g. 1000000 to have them every second")

    def sample(self, ctx: LiveContext) -> None:
        super().sample(ctx)
        if not self.told_full and any(c.full for c in self.tails):
            self.told_full = True
            ctx.note(f"NCCL Inspector: a rank's output reached {MAX_COPY_BYTES >> 20} MiB copied; the rest stays in "
                     "the job's own file (analyze that folder too for the whole run)")

    def status(self) -> str:
        return super().status() if self.tails else "not enabled in the job"
