"""Which samplers `attach` runs, from its options (one place, so `run` can reuse it)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from perftracker.live.sampler import Sampler
from perftracker.live.samplers.env_snapshot import EnvSampler
from perftracker.live.samplers.follow import FollowSampler
from perftracker.live.samplers.inspector_sampler import InspectorSampler
from perftracker.live.samplers.netdev_sampler import NetdevSampler
from perftracker.live.samplers.nvml_sampler import NvmlSampler
from perftracker.live.samplers.profile_sampler import ProfileSampler
from perftracker.live.samplers.rdma_sampler import RdmaSampler
from perftracker.live.samplers.stack_steps import StackStepsSampler
from perftracker.live.samplers.stacks import StackSampler
from perftracker.live.samplers.step_state import StepFeed
from perftracker.live.samplers.steps_sampler import StepsSampler
from perftracker.live.samplers.traces import TraceSampler
from perftracker.live.watch.watcher import WatchOptions, WatchSampler


@dataclass
class SamplerOptions:
    interval_s: float = 5.0
    stack_interval_s: float = 15.0
    stacks: bool = True
    gpu: bool = True
    rdma: bool = True
    net: bool = True  # Ethernet interfaces the job uses and TCP counters, about every net_interval_s
    net_interval_s: float = 1.0
    net_resolve_s: float = 5.0  # how often the job's interfaces and peers are looked up again
    net_watch_s: float = 0.1  # link state polled this often between samples (carrier changes timed to it)
    net_qdisc_s: float = 0.0  # queue stats (`tc`) at most this often (0: with every sample)
    steps_poll_s: float = 0.25  # new step records read this often
    follow_s: float = 1.0  # NCCL logs and NCCL Inspector output copied this often
    stack_trigger_s: float = 0.25  # stack requests, --stacks-at and stalled steps checked this often
    logs: bool = True
    steps: bool = True
    env: bool = True
    inspector: bool = True  # follow NCCL Inspector output where the job's environment enables the plugin
    nccl_logs: list[Path] = field(default_factory=list)
    job_log: Path | None = None
    trace_steps: int = 0
    stacks_at: float | None = None
    stack_rounds_while_stepping: bool = True  # --watch: periodic stack rounds only while no steps come
    profile_seconds: float = 0.0  # one py-spy record burst of every rank (attach's default: 10 s)
    profile_rate_hz: int = 20
    profile_delay_s: float = 2.0  # after the session starts
    watch: WatchOptions | None = None  # attach/run --watch: the online rules and their incidents
    stack_steps_every_s: float = 60.0  # --watch, no other step source: a sampled-stack burst this often (0: off)


# --watch's steady state: each of these options at least this slow
WATCH_FLOORS = {"interval_s": 10.0, "net_interval_s": 30.0, "net_resolve_s": 600.0, "net_watch_s": 2.0,
                "net_qdisc_s": 300.0, "steps_poll_s": 1.0, "follow_s": 5.0, "stack_trigger_s": 1.0,
                "stack_interval_s": 60.0}


def watch_rates(options: SamplerOptions) -> SamplerOptions:
    """The steady state of --watch (docs/internals/live.md): slower counters, steps and logs, stack rounds only
    while no step comes, no start-up recording. Returns new options; `options` is left as it was."""
    slower = {name: max(getattr(options, name), floor) for name, floor in WATCH_FLOORS.items()}
    return replace(options, **slower, stack_rounds_while_stepping=False, profile_seconds=0.0,
                   nccl_logs=list(options.nccl_logs))


def build_samplers(options: SamplerOptions) -> list[Sampler]:
    samplers: list[Sampler] = []
    if options.net:  # first: its first sample is taken as the session starts
        samplers.append(NetdevSampler(interval_s=options.net_interval_s, resolve_every_s=options.net_resolve_s,
                                      watch_s=options.net_watch_s, qdisc_every_s=options.net_qdisc_s))
    if options.env:
        samplers.append(EnvSampler())
    if options.logs:
        samplers.append(FollowSampler(extra_logs=list(options.nccl_logs), interval_s=options.follow_s))
    if options.inspector:
        samplers.append(InspectorSampler(interval_s=options.follow_s))
    if options.gpu:
        samplers.append(NvmlSampler(interval_s=options.interval_s))
    if options.rdma:
        samplers.append(RdmaSampler(interval_s=options.interval_s))
    stacks: StackSampler | None = None
    if options.stacks:
        stacks = StackSampler(interval_s=options.stack_interval_s, stacks_at=options.stacks_at,
                              trigger_s=options.stack_trigger_s,
                              rounds_while_stepping=options.stack_rounds_while_stepping)
        samplers.append(stacks)
    if options.stacks and options.profile_seconds > 0:
        samplers.append(ProfileSampler(seconds=options.profile_seconds, rate_hz=options.profile_rate_hz,
                                       delay_s=options.profile_delay_s))
    feed = StepFeed() if options.steps and options.watch is not None else None  # step records parsed once
    if options.steps:
        samplers.append(StepsSampler(job_log=options.job_log, interval_s=options.steps_poll_s, feed=feed))
    if options.trace_steps > 0:
        samplers.append(TraceSampler(steps=options.trace_steps))
    if options.watch is not None and options.stacks and options.stack_steps_every_s > 0:  # unprepared jobs' steps
        samplers.append(StackStepsSampler.every(options.stack_steps_every_s, feed))
    if options.watch is not None:
        samplers.append(WatchSampler(options=options.watch, stacks=stacks, feed=feed))  # one py-spy per rank at a time
    return samplers
