"""Start a job prepared for diagnosis, pass its output and exit code through, and keep its artifacts.

`prepare_env` adds, only where the user has not set them, NCCL debug logs, Kineto's daemon mode, the flight
recorder, the step hook (`bootstrap/sitecustomize.py` on PYTHONPATH) and PERFTRACKER_RUN_DIR / _HOST.
`RunningJob` starts the command, copies its output (`passthrough.py`), forwards SIGINT/SIGTERM/SIGHUP, and
`wait` returns the job's exit status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perftracker.live.attach.passthrough import OutputCopier

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


class RunningJob:
    """The launched command: its process, output copies, and the signals forwarded to it."""

    def __init__(self, command: Sequence[str], env: dict[str, str], run_dir: Path) -> None:
        self.proc = subprocess.Popen(list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=False)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out_dir = run_dir / "output"
        self.copiers = [
            OutputCopier("stdout", self.proc.stdout, sys.stdout, out_dir / "launcher.stdout.log").start(),
            OutputCopier("stderr", self.proc.stderr, sys.stderr, out_dir / "launcher.stderr.log").start(),
        ]
        self.signal_received: int | None = None

    def forward_signals(self) -> None:
        def forward(signum: int, _frame: object) -> None:
            self.signal_received = signum
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, forward)

    def wait(self) -> int:
        code = self.proc.wait()
        for copier in self.copiers:
            copier.join(timeout=10)
        return code

    def copy_problems(self) -> list[str]:
        """What went wrong keeping the copies of the job's output (nothing when they are whole)."""
        return [p for p in (c.problem() for c in self.copiers) if p]


def exit_status(code: int) -> int:
    """A shell's view of a process exit: 128+N for death by signal N."""
    return 128 - code if code < 0 else code
