"""`perftracker run --sanity`: the sanity check launched the way the job is, before the job.

`sanity_command` turns a torchrun (or plain python) launch into the check's launch, keeping the launcher's
arguments; any other launcher is a UsageError. `run_sanity` runs it into OUT/launch.log, bounded in time, and
returns a `SanityOutcome` read from OUT/findings.json (removed first, so a stale verdict is never read);
`passed` is True only for a check that ended as a check ends and wrote its verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from perftracker.collectors.sanity import join_s
from perftracker.errors import UsageError
from perftracker.output_names import FINDINGS
from perftracker.outputs import writing

TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's options that change how its script is run: ours is always `-m perftracker`
_SCRIPT_FLAGS = ("-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path")
_PYTHON_NAMES = ("python", "python3")
CHECK_ENDED = (0, 3)  # `perftracker sanity`'s exit codes when the check ran to its verdict
LOG_TAIL = 8192
SLACK_S = 60.0  # interpreter and torch start-up, writing


@dataclass
class SanityOutcome:
    """What the check said on this machine."""

    code: int
    wrote: bool
    exclude: list[str] = field(default_factory=list)
    why: dict[str, list[str]] = field(default_factory=dict)
    timed_out: bool = False
    reason: str = ""

    @property
    def passed(self) -> bool:
        """See the module docstring."""
        return not self.timed_out and (self.code in CHECK_ENDED if self.wrote else self.code == 0)


def _is_python(word: str) -> bool:
    name = Path(word).name
    return name in _PYTHON_NAMES or name.startswith("python3.") or word == sys.executable


def _torchrun_prefix(launch: list[str]) -> tuple[list[str], list[str]] | None:
    """(the launcher itself, its arguments) for a torchrun launch, else None."""
    if Path(launch[0]).name == "torchrun":
        return launch[:1], launch[1:]
    if len(launch) >= 3 and _is_python(launch[0]) and launch[1] == "-m" and launch[2] in TORCHRUN_MODULES:
        return launch[:3], launch[3:]
    return None


def sanity_command(launch: list[str], out: Path, time_box_s: float) -> list[str]:
    """See the module docstring."""
    check = ["-m", "perftracker", "sanity", "-o", str(out), "--time-box", f"{time_box_s:g}"]
    torchrun = _torchrun_prefix(launch)
    if torchrun is not None:
        from torch.distributed.run import get_args_parser  # torch is what the launch runs: present

        launcher, rest = torchrun
        try:
            parsed = get_args_parser().parse_args(rest)
        except SystemExit:
            raise UsageError(f"torchrun's arguments do not parse: {' '.join(rest)[:200]}", "--sanity",
                             "check the launch command (torchrun --help)") from None
        script_at = len(rest) - len(parsed.training_script_args) - 1
        args = [a for a in rest[:script_at] if a not in _SCRIPT_FLAGS]
        return [*launcher, *args, *check]
    if _is_python(launch[0]) and len(launch) > 1 and not launch[1].startswith("-"):
        return [sys.executable, *check]
    raise UsageError(f"--sanity reads torchrun launches and plain python scripts, not {Path(launch[0]).name!r}",
                     "--sanity", "run the check under your launcher first (e.g. `srun ... python -m perftracker "
                     "sanity -o DIR`, docs/guides/sanity.md), then the job")


def _package_path(env: dict[str, str]) -> dict[str, str]:
    """`env` with this perftracker's folder first on PYTHONPATH (the check's ranks import the same code)."""
    root = str(Path(__file__).resolve().parents[3])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join([root, *[p for p in paths if p != root]])}


def run_sanity(command: list[str], env: dict[str, str], out: Path, time_box_s: float) -> SanityOutcome:
    """See the module docstring."""
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        (out / FINDINGS).unlink(missing_ok=True)
    limit = join_s(time_box_s) + 2 * time_box_s + SLACK_S
    with writing(out / "launch.log"), (out / "launch.log").open("wb") as log:
        proc = subprocess.Popen(command, env=_package_path(env), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # the launcher's leftovers too (a torchrun agent waiting for a dead node)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if timed_out:
            code = proc.wait()
    reason = _last_word(out / "launch.log")
    findings_file = out / FINDINGS
    try:
        doc = json.loads(findings_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not written here (or not whole): no verdict to read
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        return SanityOutcome(code=code, wrote=False, timed_out=timed_out, reason=reason)
    exclude = [str(h) for h in doc["summary"].get("exclude", [])]
    why = {h: [str(f["title"]) for f in doc.get("findings", []) if h in f.get("hosts", [])
               and f.get("severity") in ("warning", "critical")] for h in exclude}
    return SanityOutcome(code=code, wrote=True, exclude=exclude, why=why, timed_out=timed_out, reason=reason)


def _last_word(log: Path) -> str:
    """The check's last `perftracker:` line in its launch log (bounded), or ''."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - LOG_TAIL))
            tail = handle.read(LOG_TAIL).decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.lstrip().startswith("perftracker")]
    return lines[-1][:300] if lines else ""
