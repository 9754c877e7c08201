"""Configuration sources: a live process's environment, env files / job specs, run-dir env snapshots.

Promise: only allow-listed variables are ever returned, and a variable whose name or value looks like a secret
is dropped (`perftracker/redaction.py`'s rules). Values are kept verbatim (stray spaces matter to NCCL). Rows
conform to the Store's `config` table: rank, host, pid, key, value, source (env | env_file), evidence.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from perftracker.bounded import load_json_file, read_text
from perftracker.errors import InputError
from perftracker.launcher_env import rank_in
from perftracker.redaction import capped, carries_credential, keep_variable, safe_env
from perftracker.store import LoadNote
from perftracker.store.schema import conform
from perftracker.values import MAX_RANK, ascii_int, int_in, rank_in_range

MAX_ENV_BYTES = 64 * 1024 * 1024  # an environment or job spec is kilobytes

_ASSIGN = re.compile(r"^\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")




def capture_process_env(pid: int) -> dict[str, str]:
    """The filtered exec-time environment of process `pid` (psutil reads /proc/<pid>/environ)."""
    import psutil

    try:
        env = psutil.Process(pid).environ()
    except psutil.NoSuchProcess:
        raise InputError(f"no process with pid {pid}", hint="check the pid with `ps`") from None
    except psutil.AccessDenied:
        raise InputError(f"not allowed to read the environment of pid {pid}",
                         hint="run as the process's user or as root") from None
    return safe_env(env)


def rank_of(env: Mapping[str, str]) -> int:
    """The global rank the launcher gave the process, -1 when none of the usual variables is set."""
    rank = rank_in(env)
    return -1 if rank is None else rank


def parse_env_text(text: str) -> list[tuple[str, str, int]]:
    """(key, value, line) assignments from an env file or a job spec.

    A line `KEY=VALUE` or `export KEY=VALUE` gives the rest of the line verbatim (outer quotes removed);
    other lines (`mpirun -x K=V ...`, `K1=V1 K2=V2 torchrun ...`) are split like a shell would.
    """
    out: list[tuple[str, str, int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _ASSIGN.match(line)
        if m is not None and not re.search(r"\s[A-Za-z_][A-Za-z0-9_]*=", _strip_quoted(m.group("value"))):
            out.append((m.group("key"), _unquote(m.group("value")), lineno))
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            tokens = line.split()
        for token in tokens:
            tm = _ASSIGN.match(token)
            if tm is not None:
                out.append((tm.group("key"), tm.group("value"), lineno))
    return out


def _strip_quoted(value: str) -> str:
    return re.sub(r"\"[^\"]*\"|'[^']*'", "", value)


def _unquote(value: str) -> str:
    value = value.rstrip("\r\n")
    stripped = value.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
        return stripped[1:-1]
    if " #" in value and not value.lstrip().startswith(("'", '"')):
        value = value.split(" #", 1)[0]
    return value.rstrip() if value.strip() else value


def read_env_file(path: Path) -> dict[str, tuple[str, int]]:
    """Allow-listed assignments of an env file: key -> (value, line); the last assignment wins."""
    try:
        text, read = read_text(path, MAX_ENV_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read env file: {exc.strerror or exc}", where=str(path)) from None
    except InputError as exc:
        raise InputError(f"cannot read env file: {exc.what}", where=str(path), hint=exc.hint) from None
    if read.left_out:  # settings past the cap would go unchecked: say so rather than pass them
        raise InputError(f"the env file is {read.size:,} bytes, over the {MAX_ENV_BYTES:,} an env file may "
                         "hold: the settings past that point would not be checked", where=str(path),
                         hint="give an env file of the job's settings alone")
    return {k: (capped(v), n) for k, v, n in parse_env_text(text) if keep_variable(k) and not carries_credential(k, v)}


def env_rows(env: Mapping[str, str], *, source: str, evidence: str, host: str = "", pid: int = -1,
             rank: int | None = None, lines: Mapping[str, int] | None = None) -> list[dict[str, object]]:
    """Config-table rows for one environment (`rank` defaults to what the env's RANK says)."""
    r = rank_of(env) if rank is None else rank
    return [{"rank": r, "host": host, "pid": pid, "key": k, "value": v, "source": source,
             "evidence": f"{evidence}:{lines[k]}" if lines and k in lines else evidence}
            for k, v in sorted(env.items())]


def env_file_frame(path: Path, host: str = "") -> pd.DataFrame:
    """The config table of one env file or job spec."""
    assigned = read_env_file(path)
    env = {k: v for k, (v, _) in assigned.items()}
    rows = env_rows(env, source="env_file", evidence=str(path), host=host,
                    lines={k: n for k, (_, n) in assigned.items()})
    return conform("config", pd.DataFrame(rows))


def process_env_frame(pid: int, host: str) -> pd.DataFrame:
    """The config table of a live process's captured environment (the process runs on `host`, this machine)."""
    env = capture_process_env(pid)
    rows = env_rows(env, source="env", evidence=f"pid {pid}", host=host, pid=pid)
    return conform("config", pd.DataFrame(rows))


def load_env_snapshots(paths: Iterable[Path]) -> tuple[pd.DataFrame, list[LoadNote]]:
    """Read run-directory `env/rank-<r>.json` files: {"rank", "host", "pid", "env": {...}} or a flat dict."""
    rows: list[dict[str, object]] = []
    notes: list[LoadNote] = []
    for path in paths:
        try:
            data = load_json_file(Path(path), MAX_ENV_BYTES)
        except (InputError, OSError, ValueError) as exc:
            notes.append(LoadNote("warning", str(path), f"environment snapshot unreadable: {getattr(exc, 'message', exc)}"))
            continue
        if not isinstance(data, dict):
            notes.append(LoadNote("warning", str(path), "environment snapshot is not a JSON object"))
            continue
        env_obj = data.get("env")
        env_raw: dict[str, object] = env_obj if isinstance(env_obj, dict) else data
        env = safe_env({str(k): str(v) for k, v in env_raw.items() if isinstance(v, (str, int, float))})
        m = re.search(r"rank[-_]?(\d+)", Path(path).name)
        named = ascii_int(m.group(1), 0, MAX_RANK) if m else None
        rank = rank_in_range(data.get("rank"))
        rank = rank if rank is not None else (named if named is not None else rank_of(env))
        host = str(data.get("host") or env.get("HOSTNAME", ""))
        pid = int_in(data.get("pid"), 0)
        pid = -1 if pid is None else pid
        rows.extend(env_rows(env, source="env", evidence=str(path), host=host, pid=pid, rank=rank))
    return conform("config", pd.DataFrame(rows)), notes
