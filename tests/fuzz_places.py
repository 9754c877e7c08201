"""Fuzzing places, not only contents: run directories reshaped, output folders and cache entries edited.

Shared by tests/test_fuzz_places.py (fixed seeds, about a minute) and scripts/fuzz.py (`--targets places,
outputs,cache`, long runs). Each input starts from tests/fixtures/fuzz_run and applies a few *place*
mutations drawn through a `Draw` (see tests/fuzzing.py): files replaced by links outside the run (to a
folder holding a marker line and planted secrets), links inside, link loops, links to /dev/zero,
/dev/null and /proc/kmsg, FIFOs, links to folders (/, outside, inside), odd names (control characters,
escape sequences, rich markup, HTML, newlines that could forge a "Verdict:" line), deep nesting (to
depths past the interpreter's stack), many files, hidden files, long values (a 1 MiB env value, a
1 MiB log line with secrets, a 1 MiB argument), and an earlier output folder inside the input.

`check_places(draw, folder)` runs `perftracker analyze` (its own function) on such a run and passes when
it exits 0, 2 or 3 within the time limit, and no output (terminal, findings.json, report.html) holds a
line from outside the run, a planted secret or a raw escape character. `check_output(draw, folder)`
re-renders an analysis output folder whose findings.json, tables/ or files were edited or replaced by
links/FIFOs (`perftracker report`); `check_cache(draw, folder)` analyzes with a cache one of whose entry
files was edited, cut, replaced or made another's; both pass on exit 0, 2 or 3 with no crash.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import typer
from fuzzing import Draw, copy_fuzz_run, mutate_file, time_limit

MARKER = "OUTSIDE-MARKER-9c1e"
SECRETS = ("hunter2", "ghp_Zx9", "s3cretpw", "wJalrXUtnFEMI")
SECRET_LINE = ("[rank0]: RuntimeError: https://bob:s3cretpw@h.example/x password=hunter2 "
               "ghp_Zx9AbCdEf0123456789AbCdEf0123456789 wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
ODD_NAMES = ("node\x1b[31m-a.1.log", "rank-0\nVerdict: all good.json", "[/red][bold]x.log", "<script>x</script>.log",
             "r\u202eank-1.json", "\u00e9\u4e2d.log", "-rf .log", "a" * 200 + ".log")


def _files(run: Path) -> list[Path]:
    """The regular files under `run`, without recursion (Path.rglob recurses per level: a RecursionError
    once `_deep` made its 1,100 levels)."""
    found, todo = [], [run]
    while todo:
        with os.scandir(todo.pop()) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    found.append(Path(entry.path))
    return sorted(found)


def _outside(folder: Path) -> Path:
    outside = folder / "outside"
    if not outside.exists():
        outside.mkdir(parents=True)
        (outside / "job.log").write_text(f"[rank0]: Traceback (most recent call last):\n[rank0]: RuntimeError: "
                                         f"{MARKER}\n{SECRET_LINE}\n", encoding="utf-8")
        (outside / "env.json").write_text(json.dumps({"rank": 0, "env": {"NCCL_IB_HCA": MARKER}}), encoding="utf-8")
    return outside


def _pick(run: Path, draw: Draw) -> Path:
    files = _files(run)
    return files[draw(0, len(files) - 1)]


def _replace_with_link(run: Path, draw: Draw, folder: Path) -> None:
    target = _pick(run, draw)
    target.unlink()
    choices = [_outside(folder) / "job.log", _outside(folder) / "env.json", Path("/dev/zero"), Path("/dev/null"),
               Path("/proc/kmsg"), Path("/proc/self/environ"), target.parent / "nowhere"]
    target.symlink_to(choices[draw(0, len(choices) - 1)])


def _fifo(run: Path, draw: Draw, folder: Path) -> None:
    target = _pick(run, draw)
    target.unlink()
    os.mkfifo(target)


def _loop(run: Path, draw: Draw, folder: Path) -> None:
    parent, tag = _pick(run, draw).parent, draw(0, 10**9)
    (parent / f"loop-{tag}-a.json").symlink_to(parent / f"loop-{tag}-b.json")
    (parent / f"loop-{tag}-b.json").symlink_to(parent / f"loop-{tag}-a.json")


def _folder_link(run: Path, draw: Draw, folder: Path) -> None:
    choices = [Path("/"), _outside(folder), run, Path("/proc"), Path("/dev")]
    (run / f"linked-{draw(0, 999)}").symlink_to(choices[draw(0, len(choices) - 1)])


def _inside_link(run: Path, draw: Draw, folder: Path) -> None:
    source = _pick(run, draw)
    (source.parent / f"copy-{draw(0, 999)}{''.join(source.suffixes)}").symlink_to(source)


def _odd_name(run: Path, draw: Draw, folder: Path) -> None:
    source = _pick(run, draw)
    name = ODD_NAMES[draw(0, len(ODD_NAMES) - 1)]
    with contextlib.suppress(OSError):
        source.rename(source.parent / name)


def _deep(run: Path, draw: Draw, folder: Path) -> None:
    source = _pick(run, draw)
    deep = run / f"deep-{draw(0, 10**9)}"
    deep.mkdir()
    for _ in range(draw(60, 1100)):  # level by level: Path.mkdir(parents=True) recurses (RecursionError near 1,000)
        deep = deep / "d"
        deep.mkdir()
    shutil.copy(source, deep / source.name)


def unnest(run: Path) -> None:
    """Remove `_deep`'s folders bottom-up, level by level (shutil.rmtree and pytest's clean-up of old temporary
    folders recurse per level: past ~1,000 a RecursionError)."""
    for top in list(run.glob("deep-*")):
        chain = [top]
        while (chain[-1] / "d").is_dir():
            chain.append(chain[-1] / "d")
        for level in reversed(chain):
            for entry in level.iterdir():
                if not entry.is_dir() or entry.is_symlink():
                    entry.unlink()
                elif entry.name != "d":
                    shutil.rmtree(entry)
            level.rmdir()


def _many(run: Path, draw: Draw, folder: Path) -> None:
    many = run / "many"
    many.mkdir(exist_ok=True)
    for i in range(draw(100, 3000)):
        (many / f"f{i}.log").write_bytes(b"")


def _hidden(run: Path, draw: Draw, folder: Path) -> None:
    source = _pick(run, draw)
    source.rename(source.parent / f".{source.name}")


def _long_values(run: Path, draw: Draw, folder: Path) -> None:
    size = draw(1 << 16, 1 << 20)
    env = {"NCCL_IB_HCA": ",".join(f"mlx5_{i}:1" for i in range(size // 10)), "NCCL_SOCKET_IFNAME": "a://" * (size // 4),
           "TORCH_EXTRA": SECRET_LINE + " a=" * (size // 3)}
    (run / "env" / "rank-0.json").write_text(json.dumps({"rank": 0, "env": env}), encoding="utf-8")
    with open(run / "output" / "job.log", "a", encoding="utf-8") as log:
        log.write(f"[rank0]: Traceback (most recent call last):\n{SECRET_LINE} {'x' * size}\n")


def _planted_secrets(run: Path, draw: Draw, folder: Path) -> None:
    with open(run / "output" / "job.log", "a", encoding="utf-8") as log:
        log.write(f"[rank0]: Traceback (most recent call last):\n{SECRET_LINE}\n")


def _output_inside(run: Path, draw: Draw, folder: Path) -> None:
    out = run / f"perftracker-out-{draw(0, 10**9)}"
    (out / "tables").mkdir(parents=True)
    (out / "findings.json").write_text('{"schema_version": 1, "findings": []}', encoding="utf-8")
    (out / "timeline.json.gz").write_bytes(b"\x1f\x8b")


PLACES: dict[str, Callable[[Path, Draw, Path], None]] = {
    "link": _replace_with_link, "fifo": _fifo, "loop": _loop, "folder-link": _folder_link,
    "inside-link": _inside_link, "odd-name": _odd_name, "deep": _deep, "many": _many, "hidden": _hidden,
    "long-values": _long_values, "secrets": _planted_secrets, "output-inside": _output_inside,
}


def reshape(run: Path, draw: Draw, folder: Path, families: list[str] | None = None) -> list[str]:
    """Apply `families` (each once, in order), else 1 to 3 place mutations drawn, to `run`; their names."""
    names = sorted(PLACES)
    chosen = families if families is not None else [names[draw(0, len(names) - 1)] for _ in range(draw(1, 3))]
    for name in chosen:
        PLACES[name](run, draw, folder)
    return chosen


def leaks(texts: list[str]) -> list[str]:
    """What no output may hold: a line from outside the run, a planted secret, a raw escape character."""
    found = [s for s in (MARKER, *SECRETS) if any(s in t for t in texts)]
    return found + (["ESC"] if any("\x1b" in t for t in texts) else [])


def _invoke(fn: Callable[[], None], timeout_s: float) -> tuple[int, str]:
    from perftracker.errors import PerftrackerError

    sink = io.StringIO()
    try:
        with time_limit(timeout_s), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            fn()
    except typer.Exit as done:
        return int(done.exit_code), sink.getvalue()
    except PerftrackerError as exc:
        return 2, sink.getvalue() + exc.message
    return 0, sink.getvalue()


def _analyze(run: Path, out: Path, cache: bool = False) -> Callable[[], None]:
    from perftracker.cli import analyze as analyze_cmd

    return lambda: analyze_cmd.analyze(path=run, out=out, no_cache=not cache, workers=1, quiet=False, fail_on=None,
                                       hta_compat=False, comm_kernel=None, profile=None, sysfs_root=None, job=None,
                                       each_job=False)


def check_places(draw: Draw, folder: Path, timeout_s: float = 120.0,
                 families: list[str] | None = None) -> tuple[int, list[str]]:
    """(exit code, mutations) of analyze on a reshaped fuzz run; raises AssertionError on a leak or a bad
    exit, Hang past the limit, anything else as the CLI's exit 70 would be."""
    run = copy_fuzz_run(folder / "run", symlinks=True)
    try:
        names = reshape(run, draw, folder, families)
        out = folder / "out" if draw(0, 1) else run / "out"  # -o outside, or inside the input
        code, said = _invoke(_analyze(run, out), timeout_s)
    finally:
        unnest(run)
    assert code in (0, 2, 3), f"{names}: exit {code}: {said[-500:]}"
    texts = [said] + [(out / name).read_text(encoding="utf-8", errors="replace")
                      for name in ("findings.json", "report.html") if (out / name).is_file()]
    assert not leaks(texts), f"{names}: {leaks(texts)} in an output"
    return code, names


def check_output(draw: Draw, folder: Path, analyzed: Path, timeout_s: float = 120.0) -> int:
    """Exit code of `perftracker report` on a copy of the output folder `analyzed`, edited."""
    from perftracker.cli import report as report_cmd

    out = folder / "out"
    shutil.copytree(analyzed, out, symlinks=True)
    (out / ".perftracker-output").unlink(missing_ok=True)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".parquet"))
    victim = files[draw(0, len(files) - 1)]
    how = draw(0, 4)
    mine = out / "tables" / "mine.csv"
    if how == 4:  # a mark whose manifest is mutated (or claims a user's file): the user's file is never touched
        mine.write_text("the user's\n")
        manifest = json.dumps({"perftracker_output": 1, "made_from": "x", "files": ["tables/mine.csv", "../../etc"]})
        (out / ".perftracker-output").write_bytes(mutate_file(manifest.encode(), draw) if draw(0, 1) else b"")
    elif how == 0:
        victim.write_bytes(mutate_file(victim.read_bytes(), draw))
    elif how == 1:
        victim.unlink()
        victim.symlink_to(("/dev/zero", "/proc/kmsg", "/dev/null", "/")[draw(0, 3)])
    elif how == 2:
        victim.unlink()
        os.mkfifo(victim)
    else:
        victim.write_bytes(victim.read_bytes()[: draw(0, max(0, victim.stat().st_size - 1))])
    code, said = _invoke(lambda: report_cmd.report(path=out), timeout_s)
    assert code in (0, 2, 3), f"report: exit {code} ({victim.name}, edit {how}): {said[-500:]}"
    assert how != 4 or mine.read_text() == "the user's\n", "report touched a file perftracker did not write"
    return code


def check_cache(draw: Draw, folder: Path, trace_run: Path, cache: Path, timeout_s: float = 120.0) -> int:
    """Exit code of analyze with the cache `cache` (filled for `trace_run`) after one entry file was edited."""
    entries = sorted(p for p in cache.iterdir() if p.is_file() and not p.name.startswith("."))
    victim = entries[draw(0, len(entries) - 1)]
    how = draw(0, 3)
    if how == 0:
        victim.write_bytes(mutate_file(victim.read_bytes(), draw))
    elif how == 1:
        victim.write_bytes(victim.read_bytes()[: draw(0, max(0, victim.stat().st_size - 1))])
    elif how == 2:
        os.chmod(victim, 0o666)
    else:
        victim.unlink()
        victim.symlink_to("/dev/zero")
    env = dict(os.environ)
    os.environ["XDG_CACHE_HOME"] = str(cache.parent)
    try:
        code, said = _invoke(_analyze(trace_run, folder / "out", cache=True), timeout_s)
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert code in (0, 2, 3), f"cache: exit {code} ({victim.name}, edit {how}): {said[-500:]}"
    return code
