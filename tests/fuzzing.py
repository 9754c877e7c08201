"""Fuzzing every input parser and the analyze / postmortem commands: targets, mutations, and the check.

Shared by tests/test_fuzz.py (hypothesis, a bounded budget in the suite) and scripts/fuzz.py (longer
runs). A mutation starts from one file of tests/fixtures/fuzz_run/ (a small run directory holding
every kind of input, made by scripts/make_fuzz_run.py) and applies a few edits drawn through a `Draw`
(hypothesis draws in the tests, so failures shrink; a seeded random generator in the script): cuts,
byte changes, deletions, repeats, and insertions of the values that broke parsers before (1e30,
20-digit ints, NaN, Infinity, `1.`, `-`, `1e`, lone surrogates, superscript digits, deep nesting,
long runs, pickle opcodes). gzip files are mutated inside the stream (then recompressed) or as bytes.

`check_parser(target, data, folder)` runs one parser in-process on the mutated file; it passes when
the parser returns (rows and notes) or, for a reader allowed to refuse a whole file, raises
`InputError`; anything else, or a run longer than `timeout_s`, is a failure. `check_cli(command, ...)`
runs the command's own function (what `perftracker analyze|postmortem` calls under typer) on a copy of
the run directory with one file mutated: exit 0, 2 or 3 pass; any other exception is what the CLI
would report as exit 70.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import re
import shutil
import signal
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import typer

FUZZ_RUN = Path(__file__).resolve().parent / "fixtures" / "fuzz_run"
# An Nsight Systems export of another job (pipit's saxpy run): fuzzed through the loader on its own; the
# commands' runs leave its folder out, since two jobs in one folder is a refusal (exit 2) before any analysis.
NSYS_SEED = "nsys/saxpy-report.sqlite"
# Option files (--thresholds, --devices), not inputs of a run: fuzzed through their readers, left out of the runs.
OPTIONS = "options"
_NOT_IN_RUNS = ("nsys", OPTIONS)

# Values that broke a parser before (issue 14) or sit on a boundary of one.
TOKENS: tuple[bytes, ...] = (
    b"1e30", b"-1e30", b"1e400", b"99999999999999999999", b"9223372036854775808", b"-9223372036854775809",
    b"4294967296", b"2147483648", b"-1", b"0", b"NaN", b"Infinity", b"-Infinity", b"nan", b"inf", b"1.", b"-", b"1e",
    b"0x", b"null", b"true", b"[1]", b"{}", b'{"a":1}', b'"x"', b'"', b"\\", b"\\ud800", b"\\udfff", "²".encode(),
    "٣".encode(), b"\x00", b"\xff\xfe", b"\n", b"\r", b"\r\n", b"\t", b"}", b"]", b",", b":", b"[" * 3000,
    b"{\"a\":" * 2000, b"9" * 5000, b"1" * 300, b" " * 4000, b"a" * 4000, b"NCCL INFO ", b" NCCL WARN ", b"[0] ",
    b"[rank99999999999999999999]: ", b"Traceback (most recent call last)", b"Watchdog caught collective operation "
    b"timeout: WorkNCCL(SeqNum=99999999999999999999, OpType=ALLREDUCE) ran for 1 milliseconds",
    b"NIC statistics:", b"# ts_ns=", b"# scrape_time 1e999", b"rank", b"ProfilerStep#99999999999999999999",
    # pickle opcodes: MARK, EMPTY_LIST, BINGET 0, APPEND, APPENDS, SETITEM, MEMOIZE, DUP, POP, GLOBAL, REDUCE, STOP
    b"(", b"]", b"h\x00", b"a", b"e", b"s", b"\x94", b"2", b"0", b"c", b"R", b".",
)


class Draw(Protocol):
    """An integer in [lo, hi] (hypothesis' draw, or a seeded random generator's)."""

    def __call__(self, lo: int, hi: int) -> int: ...


@dataclass(frozen=True)
class Target:
    """One parser: the seed files it reads, how to run it on a file, and whether it may refuse a file."""

    name: str
    seeds: tuple[str, ...]  # paths relative to FUZZ_RUN; the mutated file keeps the same path
    run: Callable[[Path], Any]
    may_refuse: bool = False  # InputError (the whole file unusable, said to the user) is a pass


def _kineto(path: Path) -> Any:
    from perftracker.collectors.traces.comm_kernels import load_comm_kernels
    from perftracker.collectors.traces.kineto import build_tables
    from perftracker.collectors.traces.kineto_read import parse_trace

    trace = parse_trace(path)
    return build_tables(trace, 0, 0, load_comm_kernels()), trace.messages()


def _loader(module: str, name: str) -> Callable[[Path], Any]:
    def run(path: Path) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)([path])
    return run


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("kineto", ("traces/rank-0.pt.trace.json", "traces/rank-1.pt.trace.json.gz"), _kineto, may_refuse=True),
    Target("steps", ("steps/rank-0.jsonl",), _loader("perftracker.collectors.steps", "load_step_files")),
    Target("nccl", ("nccl/nodeC.3001.log", "output/job.log"),
           _loader("perftracker.collectors.nccl.inputs", "load_nccl_inputs")),
    Target("inspector", ("inspector/node-a-pid4100.log", "inspector/node-b-pid4105.log"),
           _loader("perftracker.collectors.nccl.inspector", "load_inspector_inputs")),
    Target("env", ("env/rank-0.json",), _loader("perftracker.collectors.env", "load_env_snapshots")),
    Target("counters", ("counters/gpu-node-1.gpu.jsonl", "counters/gpu-node-1.rdma.jsonl",
                        "counters/node-a.nvidia-smi.csv", "counters/node-b.dcgm.prom",
                        "counters/node-r.mlx5-roce.ethtool-S.txt"),
           _loader("perftracker.collectors.counters.inputs", "load_counter_inputs")),
    Target("postmortem_files", ("fr/fr_dump_rank_0.json", "fr/nccl_trace_rank_1", "output/slurm-4242.out",
                          "output/kern.log", "output/torchrun.log", "errors/error.json", "output/train.log"),
           _loader("perftracker.collectors.postmortem.joblogs", "load_postmortem_inputs")),
    Target("stacks", ("stacks/snap/rank-0.json",), _loader("perftracker.collectors.stacks.snapshots",
                                                           "load_stack_inputs")),
    Target("profiles", ("profiles/rank-0.txt", "profiles/rank-0.json"), lambda p: _profile(p)),
    Target("manifest", ("manifest.json",), lambda p: _manifest(p)),
    Target("nsys", (NSYS_SEED,), lambda p: _nsys(p), may_refuse=True),
    Target("thresholds", (f"{OPTIONS}/thresholds.toml",), lambda p: _thresholds(p), may_refuse=True),
    Target("devices", (f"{OPTIONS}/devices.toml",), lambda p: _devices(p), may_refuse=True),
)}


def _nsys(path: Path) -> Any:
    """The whole loader on a folder holding only the (mutated) Nsight Systems export: the collector, then
    conform; an export that cannot be used at all is the loader's InputError (the user sees exit 2)."""
    from perftracker.collectors.loading import LoadOptions, load_path

    return load_path(path.parent, LoadOptions(workers=1))


def _thresholds(path: Path) -> Any:
    """A `--thresholds FILE` (bounded TOML, then every name and range checked): a UsageError refuses the file."""
    from perftracker.analyzers.thresholds import Thresholds, read_overrides
    from perftracker.errors import InputError, UsageError

    try:
        return Thresholds.with_overrides(read_overrides(path))
    except UsageError as exc:
        raise InputError(exc.what, exc.where, exc.hint) from None


def _devices(path: Path) -> Any:
    """A `--devices FILE` (bounded TOML, then every device checked): an InputError refuses the file."""
    from perftracker.analyzers.efficiency.devices import device_table

    return device_table((path,))


def _manifest(path: Path) -> Any:
    from perftracker.collectors.loading import checked_manifest, synthetic_inputs
    from perftracker.rundir import read_manifest

    manifest = read_manifest(path.parent) or {}
    return synthetic_inputs(manifest), checked_manifest(manifest)


def _profile(path: Path) -> Any:
    from perftracker.collectors.stacks.samples import load_profile_inputs

    return load_profile_inputs([path.with_suffix(".txt")])


def mutate(data: bytes, draw: Draw, pickle_like: bool = False) -> bytes:
    """`data` with 1 to 4 edits drawn from `draw` (see the module docstring)."""
    out = bytearray(data)
    for _ in range(draw(1, 4)):
        op = draw(0, 7)
        pos = draw(0, len(out))
        if op == 0:  # cut here
            del out[pos:]
        elif op in (1, 2):  # insert a token (twice as likely: it is what finds bugs)
            token = TOKENS[draw(0, len(TOKENS) - 1)]
            out[pos:pos] = token * draw(1, 3)
        elif op == 3 and out:  # change one byte
            out[min(pos, len(out) - 1)] = draw(0, 255)
        elif op == 4:  # delete a span
            del out[pos:pos + draw(1, 64)]
        elif op == 5:  # repeat a span
            span = bytes(out[pos:pos + draw(1, 200)])
            out[pos:pos] = span * draw(1, 20)
        elif op == 6:  # replace a number with a token
            numbers = [m.span() for m in re.finditer(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", bytes(out))]
            if numbers:
                start, end = numbers[draw(0, len(numbers) - 1)]
                out[start:end] = TOKENS[draw(0, 16)]
        elif op == 7 and pickle_like:  # a pickle opcode run
            out[pos:pos] = b"".join(TOKENS[draw(len(TOKENS) - 12, len(TOKENS) - 1)] for _ in range(draw(1, 8)))
    return bytes(out)


def mutate_file(data: bytes, draw: Draw) -> bytes:
    """A mutated copy of one input file's bytes: inside its gzip stream (recompressed) most of the time."""
    if data[:2] == b"\x1f\x8b":
        inner = gzip.decompress(data)
        how = draw(0, 3)
        if how == 0:
            return mutate(data, draw)  # the compressed bytes themselves
        mutated = mutate(inner, draw)
        if how == 1:  # a stream cut short after the edit: sync-flushed, no end
            deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
            return deflate.compress(mutated) + deflate.flush(zlib.Z_SYNC_FLUSH)
        return gzip.compress(mutated, mtime=0)
    return mutate(data, draw, pickle_like=data[:1] == b"\x80")


class Hang(Exception):
    """A parser ran longer than its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread after `seconds` of this process's CPU time (SIGPROF), or 10x `seconds` of
    wall time (SIGALRM: a wait that burns no CPU). CPU time, so that a busy machine does not fail a fast parser."""
    def fire(signum: int, _frame: Any) -> None:
        spent = f"{seconds} s of CPU" if signum == signal.SIGPROF else f"{10 * seconds} s of wall time"
        raise Hang(f"still running after {spent}")

    previous = {sig: signal.signal(sig, fire) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, 10 * seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def place(folder: Path, seed: str, data: bytes) -> Path:
    """Write `data` at `folder/seed` (with a profile's other half, for a profile), and return its path."""
    path = folder / seed
    path.parent.mkdir(parents=True, exist_ok=True)
    if seed.startswith("profiles/"):
        for sibling in (FUZZ_RUN / seed).parent.glob(Path(seed).stem + ".*"):
            shutil.copy(sibling, path.parent / sibling.name)
    path.write_bytes(data)
    return path


def check_parser(target: Target, seed: str, data: bytes, folder: Path, timeout_s: float = 20.0) -> str:
    """Run `target` on `data` placed at `folder/seed`; "ok" or "refused", else raise what went wrong."""
    from perftracker.errors import InputError

    path = place(folder, seed, data)
    try:
        with time_limit(timeout_s):
            target.run(path)
    except InputError:
        if not target.may_refuse:
            raise
        return "refused"
    return "ok"


@dataclass(frozen=True)
class CliResult:
    exit_code: int  # 0, 2 or 3 (anything else escapes as an exception: exit 70)
    crashed: tuple[str, ...]  # analyzers and report views that failed inside (findings.json says so)


def check_cli(command: str, seed: str, data: bytes, folder: Path, timeout_s: float = 60.0) -> CliResult:
    """Run `perftracker <command>`'s function on a copy of the fuzz run with `seed` replaced by `data`.
    Any exception other than the command's exit escapes: the CLI would report it as exit 70."""
    from perftracker.cli import analyze as analyze_cmd
    from perftracker.cli import postmortem as postmortem_cmd
    from perftracker.errors import PerftrackerError

    run = folder / "run"
    if run.exists():
        shutil.rmtree(run)
    copy_fuzz_run(run)
    place(run, seed, data)
    out = folder / "out"
    sink = io.StringIO()
    try:
        with time_limit(timeout_s), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            if command == "analyze":
                analyze_cmd.analyze(path=run, out=out, no_cache=True, workers=1, quiet=False, fail_on=None,
                                    hta_compat=False, comm_kernel=None, profile=None, sysfs_root=None, job=None,
                                    each_job=False)
            else:
                postmortem_cmd.postmortem(path=run, out=out, fail_on=None, summary=folder / "summary.txt",
                                          prom=folder / "metrics.prom")
    except typer.Exit as done:
        return CliResult(int(done.exit_code), _crashed(out))
    except PerftrackerError:
        return CliResult(2, ())
    return CliResult(0, _crashed(out))


def _crashed(out: Path) -> tuple[str, ...]:
    import json

    try:
        document = json.loads((out / "findings.json").read_text())
    except (OSError, ValueError):
        return ()
    return tuple([f["title"] for f in document.get("findings", []) if str(f.get("id", "")).startswith("crash:")
                  or "' failed: " in f.get("title", "")]
                 + [n["message"] for n in document.get("notes", []) if "could not be computed" in n["message"]])


def every_seed() -> list[tuple[str, str]]:
    """(target name, seed path) of every parser target."""
    return [(t.name, s) for t in TARGETS.values() for s in t.seeds]


def copy_fuzz_run(dest: Path, symlinks: bool = False) -> Path:
    """The fuzz run copied to `dest` less its Nsight Systems export (another job: with it, every command's run
    is the two-jobs refusal, exit 2, before any analysis)."""
    shutil.copytree(FUZZ_RUN, dest, symlinks=symlinks,
                    ignore=lambda where, names: list(_NOT_IN_RUNS) if Path(where) == FUZZ_RUN else [])
    return dest


def cli_seeds() -> list[str]:
    """Every file of the fuzz run, as seeds for the command targets."""
    return sorted(str(p.relative_to(FUZZ_RUN)) for p in FUZZ_RUN.rglob("*")
                  if p.is_file() and not str(p.relative_to(FUZZ_RUN)).startswith(tuple(f"{d}/" for d in _NOT_IN_RUNS)))
