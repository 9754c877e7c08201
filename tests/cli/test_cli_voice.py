"""Every command speaks with one voice: one `perftracker: ...` line on stderr and exit 2 for bad input or
usage, one `--fail-on` rule, and one host name computed where the command starts and passed down."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "perftracker"


def perftracker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perftracker", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def assert_one_line_exit_two(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("perftracker: ") and not line.startswith("perftracker: perftracker")
    return line


FAIL_ON_COMMANDS = [["analyze", "."], ["postmortem", "."], ["attach", "pid:1"], ["run", "--", "true"], ["lint-env"]]


def test_a_bad_fail_on_level_is_the_same_usage_error_in_every_command(tmp_path: Path) -> None:
    # GIVEN every command with --fail-on, given a level that does not exist
    # WHEN each runs
    lines = {args[0]: assert_one_line_exit_two(perftracker(*args[:1], "--fail-on", "sometimes", *args[1:],
                                                           cwd=tmp_path))
             for args in FAIL_ON_COMMANDS}
    # THEN each says the same one line, before doing any work (no run directory was made)
    assert set(lines.values()) == {"perftracker: --fail-on: unknown severity 'sometimes'; use info, warning or "
                                   "critical."}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,says", [
    (["analyze", "missing"], "missing: no such file or directory"),
    (["postmortem", "missing"], "missing: no such file or directory"),
    (["report", "missing"], "no findings.json here"),
    (["attach", "pid:999999999"], "attach: no process with pid 999999999"),
    (["lint-env", "--env-file", "missing.env"], "missing.env: cannot read env file"),
    (["run"], "run: no command to run"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_two(tmp_path: Path, args: list[str], says: str) -> None:
    # GIVEN a command given something it cannot use WHEN it runs
    line = assert_one_line_exit_two(perftracker(*args, cwd=tmp_path))
    # THEN the one line says what and where, and what to do next
    assert says in line and line.endswith(".")


def test_run_passes_its_host_name_to_the_job_and_the_manifest(tmp_path: Path) -> None:
    # GIVEN a job that prints the host name perftracker's hook would use
    job = [sys.executable, "-c", "import os; print(os.environ.get('PERFTRACKER_HOST'))"]
    # WHEN it is run with --host
    result = perftracker("run", "-o", "run", "--host", "node-x", "--no-hook", "--no-nccl-debug", "--", *job,
                         cwd=tmp_path)
    # THEN the job's output passes through naming that host, and the run directory's manifest names it too
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "node-x"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["host"] == "node-x" and "PERFTRACKER_HOST=node-x" in manifest["prepared"]


def _calls(path: Path) -> list[tuple[int, str]]:
    """(line, what) for each host-name source a module touches: host_name(), gethostname(), the
    PERFTRACKER_HOST variable, and assignments into os.environ."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in ("host_name", "gethostname"):
                found.append((node.lineno, name))
        elif isinstance(node, ast.Constant) and node.value == "PERFTRACKER_HOST":
            found.append((node.lineno, "PERFTRACKER_HOST"))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and "environ" in ast.unparse(node):
            found.append((node.lineno, "os.environ[...] ="))
    return found


# Where a host name may come from: the commands and the in-job hook (entry points), the rule itself,
# NCCL's own %h (follow.py), and the job environment `run` prepares (launch.py, not our own).
HOST_SOURCES_ALLOWED = {
    "rundir.py": {"gethostname", "PERFTRACKER_HOST"},
    "hooks/__init__.py": {"host_name"},
    "live/samplers/follow.py": {"gethostname"},
    "live/samplers/inspector_sampler.py": {"gethostname"},  # NCCL names Inspector files by gethostname(), as %h for follow.py
    "live/attach/launch.py": {"PERFTRACKER_HOST"},
    "cli/options.py": {"PERFTRACKER_HOST"},
}


def test_the_host_name_is_computed_at_the_command_boundary_and_passed_down() -> None:
    # GIVEN every module of the package
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        allowed = HOST_SOURCES_ALLOWED.get(rel, {"host_name"} if rel.startswith("cli/") else set())
        broken += [f"{rel}:{line} {what}" for line, what in _calls(path) if what not in allowed]
    # THEN only the commands (and the hook) compute it, and none sets it in its own environment
    assert broken == []
