"""Start a job prepared for diagnosis, pass its output and exit code through, and keep its artifacts.

`prepare_env` adds what makes a post-mortem possible without code changes (each only when the user
has not set it): NCCL_DEBUG=INFO with a per-process NCCL_DEBUG_FILE in the run directory,
KINETO_USE_DAEMON=1 (traces on demand), flight-recorder settings (TORCH_FR_BUFFER_SIZE and
dump-on-timeout into `fr/`), the step hook through a sitecustomize on PYTHONPATH, and
PERFTRACKER_RUN_DIR (and PERFTRACKER_HOST when the command was given a --host, so the hook's step
records name the host as the command does). `run_job` starts the command, copies its stdout/stderr byte for byte to ours and
to `output/`, forwards SIGINT/SIGTERM, and returns the job's exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"


@dataclass(frozen=True)
class LaunchOptions:
    nccl_debug: bool = True
    kineto_daemon: bool = True
    flight_recorder: bool = True
    hook: bool = True
    host: str = ""  # the --host the command was given: the ranks' step hook names this machine so too


def prepare_env(run_dir: Path, base: dict[str, str], options: LaunchOptions) -> tuple[dict[str, str], list[str]]:
    """(environment for the job, what was set) -- never overriding what the user set."""
    env = dict(base)
    changed: list[str] = []

    def default(key: str, value: str) -> None:
        if key not in env:
            env[key] = value
            changed.append(f"{key}={value}")

    run = str(run_dir.resolve())
    default("PERFTRACKER_RUN_DIR", run)
    if options.nccl_debug:
        default("NCCL_DEBUG", "INFO")
        default("NCCL_DEBUG_FILE", f"{run}/nccl/%h.%p.log")
        (run_dir / "nccl").mkdir(parents=True, exist_ok=True)
    if options.kineto_daemon:
        default("KINETO_USE_DAEMON", "1")
    if options.flight_recorder:
        (run_dir / "fr").mkdir(parents=True, exist_ok=True)
        default("TORCH_FR_BUFFER_SIZE", "2000")
        default("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        default("TORCH_FR_DUMP_TEMP_FILE", f"{run}/fr/rank_")
        default("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", f"{run}/fr/rank_")
    if options.host and env.get("PERFTRACKER_HOST") != options.host:
        env["PERFTRACKER_HOST"] = options.host
        changed.append(f"PERFTRACKER_HOST={options.host}")
    if options.hook:
        paths = [str(BOOTSTRAP)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        changed.append("PYTHONPATH+=perftracker step hook")
    return env, changed


def _tee(source: IO[bytes], sink: IO[bytes], copy: Path) -> None:
    copy.parent.mkdir(parents=True, exist_ok=True)
    with open(copy, "ab") as log:
        while True:
            chunk = source.read1(65536) if hasattr(source, "read1") else source.read(65536)
            if not chunk:
                break
            try:
                sink.write(chunk)
                sink.flush()
            except (BrokenPipeError, ValueError):
                pass
            log.write(chunk)
            log.flush()


class RunningJob:
    """The launched command: its process, output copies, and the signals forwarded to it."""

    def __init__(self, command: Sequence[str], env: dict[str, str], run_dir: Path) -> None:
        self.proc = subprocess.Popen(list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=False)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out_dir = run_dir / "output"
        self.threads = [
            threading.Thread(target=_tee, args=(self.proc.stdout, sys.stdout.buffer, out_dir / "launcher.stdout.log"),
                             daemon=True),
            threading.Thread(target=_tee, args=(self.proc.stderr, sys.stderr.buffer, out_dir / "launcher.stderr.log"),
                             daemon=True),
        ]
        for t in self.threads:
            t.start()
        self.signal_received: int | None = None

    def forward_signals(self) -> None:
        def forward(signum: int, _frame: object) -> None:
            self.signal_received = signum
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, forward)

    def wait(self) -> int:
        code = self.proc.wait()
        for t in self.threads:
            t.join(timeout=10)
        return code


def exit_status(code: int) -> int:
    """A shell's view of a process exit: 128+N for death by signal N."""
    return 128 - code if code < 0 else code
