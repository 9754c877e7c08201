"""`perftracker timeline PATH -o FILE`: one clock-aligned trace of all ranks, with the findings marked on it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perftracker import api
from perftracker import option_checks as checks
from perftracker.cli import options as opt
from perftracker.cli.progress import parsing_progress
from perftracker.cli.voice import show, terminal
from perftracker.errors import UsageError
from perftracker.output_names import TIMELINE


def parse_ranges(text: str | None, what: str) -> list[int] | None:
    """"0,3-5" -> [0, 3, 4, 5]; None stays None (everything)."""
    if text is None:
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            start, end = int(low), int(high or low)
        except ValueError:
            raise UsageError(f"--{what} {text!r}: not a list of numbers and ranges", "timeline",
                             f"write e.g. --{what} 0,3-5") from None
        if end < start or end - start > 1_000_000:
            raise UsageError(f"--{what} {text!r}: range {part} is empty or too large", "timeline",
                             f"write e.g. --{what} 0,3-5")
        out.update(range(start, end + 1))
    return sorted(out)


def timeline(
    path: Annotated[Path, typer.Argument(help="A run directory, a folder of torch.profiler traces, or one trace.")],
    out: Annotated[Path, opt.out_option("The trace to write (.json or .json.gz; open it in ui.perfetto.dev or "
                                    "chrome://tracing).")] = Path(TIMELINE),
    ranks: Annotated[str | None, typer.Option("--ranks", help="Ranks to include, e.g. 0,3-5 (default: all up to "
                                              "64; beyond, the ranks the findings name and the median rank).")]
    = None,
    steps: Annotated[str | None, typer.Option("--steps", help="Profiler steps to include, e.g. 10-12 (default: "
                                              "all that fit --max-events).")] = None,
    max_events: Annotated[int, typer.Option("--max-events", help="At most this many events (the last steps that "
                                            "fit are kept).")] = 2_000_000,
    no_cache: opt.NoCache = False,
    quiet: Annotated[bool, opt.quiet_option("Print only the line naming the file written.")] = False,
    engine: opt.Engine = "local",
    ray_address: opt.RayAddressNoWorkers = None,
    set_threshold: opt.SetThresholds = None,
    thresholds_file: opt.ThresholdsFiles = None,
    follow_links: opt.FollowLinks = False,
) -> None:
    """Merge every rank's trace into one, on one clock (offsets estimated from collective end times), one
    process per rank grouped by host, with the straggler's late arrivals and the findings marked.

    Open the file in ui.perfetto.dev or chrome://tracing.

    Examples:
      perftracker timeline traces/ -o all-ranks.json.gz
      perftracker timeline traces/ -o some.json.gz --ranks 0,3-5 --steps 10-12
    """
    checks.whole(max_events, "max_events", 1)
    overrides = opt.threshold_overrides(set_threshold, thresholds_file)
    opt.writable_file(out, "-o")
    selected = parse_ranges(ranks, "ranks"), parse_ranges(steps, "steps")
    checked = opt.checked_engine(engine)
    with parsing_progress(quiet) as progress:
        timeline_ = api.timeline(path, ranks=selected[0], steps=selected[1], max_events=max_events,
                                 cache=not no_cache, progress=progress, engine=checked, ray_address=ray_address or '',
                                 follow_links=follow_links,
                                 analysis=api.AnalysisOptions(thresholds=overrides))
    written = api.save_timeline(timeline_, out, str(path))
    console = terminal()
    show(console, f"Timeline: {out} ({written} trace events, ranks {len(timeline_.ranks)}, "
                  f"steps {len(timeline_.steps)}{'; ' + timeline_.note if timeline_.note else ''})")
    if not quiet:
        show(console, "Open it in https://ui.perfetto.dev (works offline once loaded) or chrome://tracing.")
