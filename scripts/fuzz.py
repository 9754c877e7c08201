"""Fuzz every input parser, and `analyze` / `postmortem`, for longer than the test suite does.

The targets and mutations are those of tests/fuzzing.py (tests/test_fuzz.py runs them under
hypothesis with a small budget); here a seeded random generator draws the mutations, and every
failure is kept (not just the first): counted by where it was raised, with the input saved for replay.
A failure is an exception other than the InputError a trace reader may raise for a whole file, a run
longer than --timeout, or (for the commands) an exit other than 0/2/3 or a crashed analyzer.

    python scripts/fuzz.py --examples 2000 --seed 1                    # every parser, 2000 inputs
    python scripts/fuzz.py --examples 40 --targets analyze,postmortem  # the commands (~3 s an input)
    python scripts/fuzz.py --examples 200 --targets places,outputs,cache  # places (tests/fuzz_places.py)
    python scripts/fuzz.py --examples 2000 --targets thresholds,devices,nsys  # option files, Nsight exports
    python scripts/fuzz.py --list                                      # the target names

Exit code: 0 when nothing failed, 1 otherwise (the summary lists each cause and a saved input).
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # synth.py

from fuzz_places import check_cache, check_output, check_places  # noqa: E402
from fuzzing import FUZZ_RUN, TARGETS, Hang, check_cli, check_parser, cli_seeds, copy_fuzz_run, mutate_file  # noqa: E402

COMMANDS = ("analyze", "postmortem")
PLACES = ("places", "outputs", "cache")  # tests/fuzz_places.py: reshaped runs, edited outputs and cache entries


def _fixtures(scratch: Path) -> tuple[Path, Path, Path]:
    """(an analysis output of the fuzz run, a synthetic trace folder, its filled cache) for outputs and cache."""
    from synth import SynthSpec, generate

    import perftracker

    analyzed = scratch / "analyzed"  # of the fuzz run less its other job (else the two-jobs refusal: no output)
    perftracker.analyze(copy_fuzz_run(scratch / "run"), cache=False, workers=1).write(analyzed)
    generate(SynthSpec(ranks=2, steps=2, kernels_per_step=4, collectives_per_step=1, seed=4), scratch / "traces",
             gzip=True, truth_path=scratch / "truth.json")
    return analyzed, scratch / "traces", scratch / "xdg" / "perftracker"


def _place_case(name: str, rnd: random.Random, folder: Path, fixtures: tuple[Path, Path, Path],
                timeout: float) -> str:
    """One input of a place family: its outcome ("exit N"), or an exception (AssertionError: a leak or a bad exit)."""
    import shutil

    from perftracker.collectors.loading import LoadOptions, load_path

    folder.mkdir(parents=True)
    if name == "places":
        return f"exit {check_places(rnd.randint, folder, timeout)[0]}"
    if name == "outputs":
        return f"exit {check_output(rnd.randint, folder, fixtures[0], timeout)}"
    _, traces, cache = fixtures
    shutil.rmtree(cache, ignore_errors=True)
    load_path(traces, LoadOptions(cache_dir=cache, workers=1)).close()
    return f"exit {check_cache(rnd.randint, folder, traces, cache, timeout)}"


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/perftracker/" in f.filename] or frames
    last = inside[-1] if inside else None
    return f"{type(exc).__name__} at {Path(last.filename).name}:{last.lineno}" if last else type(exc).__name__


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="inputs to try (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--targets", default=",".join(sorted(TARGETS)),
                        help="comma-separated parser names and/or analyze, postmortem (default: every parser)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one input may take (default 30)")
    parser.add_argument("--save", type=Path, default=Path("fuzz-failures"), help="where failing inputs go")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args()
    if args.list:
        for name, target in sorted(TARGETS.items()):
            print(f"{name:12} {', '.join(target.seeds)}")
        print("analyze      every file of tests/fixtures/fuzz_run (one mutated per input)\npostmortem   the same")
        print("places       the fuzz run reshaped (tests/fuzz_places.py)\noutputs      an output folder edited\n"
              "cache        a cache entry edited")
        return 0
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = [n for n in names if n not in TARGETS and n not in COMMANDS and n not in PLACES]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)} (see --list)")
    rnd = random.Random(args.seed)
    outcomes: dict[str, collections.Counter[str]] = {n: collections.Counter() for n in names}
    causes: collections.Counter[tuple[str, str]] = collections.Counter()
    saved: dict[tuple[str, str], Path] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        fixtures = _fixtures(Path(scratch) / "fixtures") if any(n in PLACES for n in names) else None
        for i in range(args.examples):
            name = names[i % len(names)]
            if name in PLACES and fixtures is not None:
                try:
                    outcomes[name][_place_case(name, rnd, Path(scratch) / str(i), fixtures, args.timeout)] += 1
                except Hang:
                    outcomes[name]["failed"] += 1
                    causes[(name, "hang (over --timeout)")] += 1
                    saved.setdefault((name, "hang (over --timeout)"), Path(scratch) / str(i))
                except Exception as exc:  # a leak, a bad exit or a crash
                    outcomes[name]["failed"] += 1
                    problem = f"{_where(exc)}: {str(exc)[:160]}"
                    causes[(name, problem)] += 1
                    saved.setdefault((name, problem), Path(scratch) / str(i))
                continue
            seed = rnd.choice(cli_seeds() if name in COMMANDS else list(TARGETS[name].seeds))
            data = mutate_file((FUZZ_RUN / seed).read_bytes(), rnd.randint)
            folder = Path(scratch) / str(i)
            problems: list[str] = []
            try:
                if name in COMMANDS:
                    result = check_cli(name, seed, data, folder, timeout_s=args.timeout)
                    outcomes[name][f"exit {result.exit_code}"] += 1
                    problems = [f"crashed inside: {c[:100]}" for c in result.crashed]
                else:
                    outcomes[name][check_parser(TARGETS[name], seed, data, folder, timeout_s=args.timeout)] += 1
            except Hang:
                problems = ["hang (over --timeout)"]
            except Exception as exc:  # what the fuzzer is looking for: any failure, counted by where it was raised
                problems = [_where(exc)]
            for problem in problems:
                outcomes[name]["failed"] += 1
                key = (name, problem)
                causes[key] += 1
                if key not in saved:
                    path = args.save / f"{name}-{len(saved)}-{Path(seed).name}"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    saved[key] = path
    elapsed = time.monotonic() - started
    print(f"{args.examples} inputs in {elapsed:.0f} s (seed {args.seed})")
    for name in names:
        print(f"  {name:12} " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes[name].items())))
    if causes:
        print(f"{len(causes)} distinct failure(s):")
        for (name, problem), count in causes.most_common():
            print(f"  {count:5} {name}: {problem} (input: {saved[(name, problem)]}, seed path of the run: "
                  f"{FUZZ_RUN.name})")
    else:
        print("no failure, no hang")
    return 1 if causes else 0


if __name__ == "__main__":
    sys.exit(main())
