"""Stack frames as the `stacks` table holds them, for the collector that writes them and the analyzers that judge them.

`StackFrame`, `encode_frames` / `decode_frames` (the `frames` column's JSON), `MainStack` and `main_stacks`; one
rank's short sampled-stack recording (`StackBurst`) and the iteration period read from it (`StepPeriod`).
Plain data, no judgment.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class StackFrame:
    name: str
    short: str  # py-spy's short file name (relative to its package root)
    line: int  # 0 or less for native frames
    file: str


@dataclass(frozen=True)
class MainStack:
    """One rank's main thread in one snapshot."""

    rank: int
    host: str
    pid: int
    idle: bool  # py-spy did not see the thread active
    frames: tuple[StackFrame, ...]  # innermost first
    switches: int | None  # voluntary context switches of the thread when dumped (None unknown)


def encode_frames(frames: Sequence[StackFrame]) -> str:
    """The `frames` column's JSON for a thread's frames."""
    return json.dumps([[f.name, f.short, f.line, f.file] for f in frames])


def decode_frames(text: str) -> list[StackFrame]:
    """A `frames` column value back into frames, innermost first."""
    return [StackFrame(str(n), str(s), int(ln), str(f)) for n, s, ln, f in json.loads(text)]


def main_stacks(stacks: pd.DataFrame) -> dict[str, dict[int, MainStack]]:
    """snapshot name -> rank -> its main thread, from the `stacks` table (unknown switch counts as None)."""
    out: dict[str, dict[int, MainStack]] = {}
    main = stacks[stacks["main"]]
    for snap, rank, host, pid, raw, active, switches in zip(main["snapshot"], main["rank"], main["host"], main["pid"],
                                                           main["frames"], main["active"], main["switches"]):
        out.setdefault(str(snap), {})[int(rank)] = MainStack(
            rank=int(rank), host=str(host), pid=int(pid), idle=not bool(active),
            frames=tuple(decode_frames(str(raw))), switches=int(switches) if int(switches) >= 0 else None)
    return out


@dataclass(frozen=True)
class StackBurst:
    """The main thread of one rank over one recording: piecewise-constant stacks in time order."""

    rank: int
    rate_hz: float  # the sampling rate asked of py-spy
    change_s: tuple[float, ...]  # when each stack began (s from the recording's start), increasing
    stacks: tuple[tuple[str, ...], ...]  # the stack from change_s[i] until change_s[i + 1] (or end_s)
    end_s: float  # when the recording ended (s from its start)
    started_ns: int = 0  # wall clock of the recording's start (time.time_ns()), 0 when not known

    @property
    def seconds(self) -> float:
        return self.end_s - (self.change_s[0] if self.change_s else self.end_s)


@dataclass(frozen=True)
class StepPeriod:
    """The iteration period found in one burst."""

    period_s: float
    confidence: float  # the peak of the stacks' self-similarity at that lag, 0..1 (1: every cycle identical)
    cycles: float  # how many periods the burst spans
    depth: int  # how many frames from the root the stack ids kept where the period was clearest
