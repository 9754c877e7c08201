"""The cheap steady state of `attach --watch`: the step records read once (new bytes only, partial lines kept,
parsed once and handed to the watcher), the liveness check, the stack rounds left out while steps come, and
the host check run at once on a link state change or an XID. Unit tests, no job (about a second in all)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perftracker.collectors.steps import parse_step_line, parse_step_lines
from perftracker.live.attach.discovery import Job, Worker
from perftracker.live.diagnosis import NoDiagnosis
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import LineTail
from perftracker.live.samplers.stacks import StackSampler
from perftracker.live.samplers.step_state import StepFeed
from perftracker.live.samplers.steps_sampler import StepsSampler, _HookedRank
from perftracker.live.watch.watcher import WatchOptions, WatchSampler
from perftracker.rundir import step_file
from perftracker.store import Store
from perftracker.store.alarms import Alarm


def _worker(rank: int, pid: int) -> Worker:
    return Worker(rank=rank, local_rank=rank, pid=pid, host="node-a", cmdline="train.py", run_id="", world_size=2,
                  parent=1)


def _ctx(tmp_path: Path, pids: tuple[int, ...] = (), diagnosis: NoDiagnosis | None = None) -> LiveContext:
    workers = [_worker(r, pid) for r, pid in enumerate(pids or (os.getpid(), os.getpid()))]
    return LiveContext(run_dir=tmp_path / "run", job=Job(launcher_pid=os.getpid(), workers=workers), host="node-a",
                       diagnosis=diagnosis or NoDiagnosis())


def _record(rank: int, step: int, dur_ms: float = 50.0) -> bytes:
    start = time.time_ns() - 10**9 + step * 1_000_000
    return json.dumps({"rank": rank, "step": step, "start_ns": start, "end_ns": start + int(dur_ms * 1e6)},
                      separators=(",", ":")).encode()


def test_a_line_tail_reads_only_the_new_bytes_and_keeps_a_partial_line(tmp_path: Path) -> None:
    # GIVEN a file with one line and half of the next
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(b"one\ntw")
    tail = LineTail(path)
    # WHEN it is read: THEN only the complete line comes, the half waits
    assert tail.read_lines() == [b"one"] and tail.partial == b"tw" and tail.offset == 6
    # WHEN nothing was appended: THEN nothing, and nothing read again
    assert tail.read_lines() == []
    # WHEN the rest of the line and another come: THEN both whole, read from where it stopped
    with open(path, "ab") as out:
        out.write(b"o\nthree\n")
    assert tail.read_lines() == [b"two", b"three"] and tail.offset == path.stat().st_size
    # WHEN the file is replaced by a shorter one: THEN it starts over
    path.write_bytes(b"new\n")
    assert tail.read_lines() == [b"new"]


def test_a_line_tail_keeps_its_file_open_between_looks_and_opens_a_replaced_one(tmp_path: Path) -> None:
    # GIVEN a tail that read a file once
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"one\n")
    tail = LineTail(path)
    assert tail.read_lines() == [b"one"]
    handle = tail._handle
    # WHEN lines are appended: THEN they come from the same open file
    with open(path, "ab") as out:
        out.write(b"two\nthr")
    assert tail.read_lines() == [b"two"] and tail._handle is handle
    # WHEN another, longer file takes the path (a rename): THEN that file is opened and read on from the same
    # offset, as the tail did when it opened the path at each look
    tmp = tmp_path / "new"
    tmp.write_bytes(b"0123456789ab\nfour\n")
    os.replace(tmp, path)
    assert tail.read_lines() == [b"thrb", b"four"] and tail._handle is not handle
    # WHEN the file goes away: THEN nothing is read and it is not held open; close() is safe twice
    path.unlink()
    assert tail.read_lines() == [] and tail._handle is None
    tail.close()
    tail.close()


def test_parse_step_lines_gives_what_parse_step_line_gives_line_by_line() -> None:
    # GIVEN good records, and lines each reader must treat alike: cut, not JSON, out of range, a UTF-8 BOM,
    # a lone surrogate escape, bytes that are not UTF-8
    lines = [_record(0, 1), b'{"rank": 0, "step": 2, "start_ns"', b"not json", _record(0, 3)[:-1] + b',"x":[1]}',
             b'{"rank": -5, "step": 1, "start_ns": 1, "end_ns": 2}', b"\xef\xbb\xbf" + _record(1, 4),
             b'{"rank": 1, "step": 5, "start_ns": 1, "end_ns": 2, "host": "\\ud800"}', b"\xff\xfe" + _record(1, 6),
             _record(1, 7)]
    # WHEN they are parsed at once: THEN the same records as one by one, in the same order
    expected = [r for r in map(parse_step_line, lines) if r is not None]
    assert parse_step_lines(lines) == expected
    assert [r["step"] for r in expected] == [1, 3, 4, 5, 7]


def test_parse_step_lines_at_once_equals_line_by_line_on_random_and_adversarial_lines() -> None:
    # GIVEN batches of lines drawn from good records and lines that are not one record alone: cut, two values on
    # one line, a record split over two lines (which together would be one), spaces around, not UTF-8, a BOM
    import random

    pieces = [_record(0, 1), _record(3, 9), b"  " + _record(1, 2), _record(2, 4) + b"  ", b'{"rank": 0, "step": 5',
              b'"start_ns": 1, "end_ns": 2}', _record(0, 6) + b"," + _record(0, 7), b'{"rank":1,"step":8,"x":"}',
              b'{"start_ns": 1, "end_ns": 2, "y": "}', b"[1, 2]", b"7", b"\xef\xbb\xbf" + _record(1, 3),
              b"\xff" + _record(1, 4), b'{"rank": 1, "step": 5, "start_ns": 9, "end_ns": 2}', "{\"h\": \"\u00e9\"}".encode()]
    rng = random.Random(5)
    for _ in range(300):
        lines = [rng.choice(pieces) for _ in range(rng.randint(0, 12))]
        # WHEN they are parsed at once: THEN exactly what each line gives alone, in order
        assert parse_step_lines(lines) == [r for r in map(parse_step_line_as_live, lines) if r is not None]


def parse_step_line_as_live(line: bytes) -> dict[str, object] | None:
    """One line as the live readers took it before: as UTF-8 text, else as bytes."""
    try:
        record = parse_step_line(line.decode("utf-8"))
    except UnicodeDecodeError:
        record = None
    return record if record is not None else parse_step_line(line)


def test_a_step_feed_hands_over_in_order_and_stays_bounded() -> None:
    # GIVEN a feed of at most 3 records
    feed = StepFeed(maxlen=3)
    # WHEN 5 are published in two batches: THEN the last 3 are taken, in order, and 2 counted as dropped
    feed.publish([{"step": 1}, {"step": 2}])
    feed.publish([{"step": 3}, {"step": 4}, {"step": 5}])
    assert [r["step"] for r in feed.take()] == [3, 4, 5] and feed.dropped == 2
    # AND a second take has nothing
    assert feed.take() == []


def test_the_watcher_fed_by_the_steps_sampler_sees_what_it_reads_from_the_step_files(tmp_path: Path) -> None:
    # GIVEN two hooked ranks whose spools get steps (one partial line at first), a steps sampler with a feed,
    # a watcher on the feed and one reading the step files the steps sampler writes
    ctx = _ctx(tmp_path)
    feed = StepFeed()
    steps = StepsSampler(find_outputs=False, feed=feed)
    spools = [tmp_path / "spool" / f"rank-{r}.jsonl" for r in range(2)]
    for rank, spool in enumerate(spools):
        spool.parent.mkdir(parents=True, exist_ok=True)
        spool.write_bytes(b"")
        steps.hooked[rank] = _HookedRank(rank, LineTail(spool), step_file(ctx.run_dir, rank))
    fed, reading = WatchSampler(options=WatchOptions(), feed=feed), WatchSampler(options=WatchOptions())
    for first, last in ((0, 15), (15, 40)):
        for rank, spool in enumerate(spools):
            with open(spool, "ab") as out:
                out.write(b"".join(_record(rank, s, 50 + 5 * rank) + b"\n" for s in range(first, last)))
        # WHEN both look after the steps sampler copied the new lines
        steps.sample(ctx)
        fed._read_steps(ctx)
        reading._read_steps(ctx)
    # THEN the copies hold every line, and both watchers hold the same series, last steps and step count
    steps.stop(ctx)
    for rank, spool in enumerate(spools):
        assert step_file(ctx.run_dir, rank).read_bytes() == spool.read_bytes()
    assert not steps._copies  # closed at stop
    for rank in range(2):
        a, b = fed.book.series_of(rank), reading.book.series_of(rank)
        assert a.steps.tolist() == b.steps.tolist() == list(range(40))
        assert a.durations_ns.tolist() == b.durations_ns.tolist()
    assert fed.state.last_step == reading.state.last_step == {0: 39, 1: 39} and fed._known == reading._known == 80
    assert fed._median() == reading._median() == 52_500_000


def test_a_series_whose_steps_came_out_of_order_is_judged_in_step_order(tmp_path: Path) -> None:
    # GIVEN a watcher fed steps 0..9 of rank 0, then 5 late ones from another source
    feed = StepFeed()
    watch = WatchSampler(options=WatchOptions(), feed=feed)
    feed.publish(parse_step_lines([_record(0, s) for s in (*range(10, 20), *range(0, 5))]))
    watch._read_steps(_ctx(tmp_path))
    # THEN its series is in step order
    assert watch.book.series_of(0).steps.tolist() == [*range(0, 5), *range(10, 20)]


def test_alive_drops_a_worker_that_exited_a_zombie_and_a_reused_pid(tmp_path: Path) -> None:
    # GIVEN two children: one running, one that exited but is not reaped yet (a zombie)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "Z" not in Path(f"/proc/{zombie.pid}/stat").read_text().split(")")[-1][:3]:
            time.sleep(0.02)
        ctx = _ctx(tmp_path, (running.pid, zombie.pid))
        # WHEN the context is asked: THEN only the running one is alive
        assert [w.pid for w in ctx.alive()] == [running.pid]
        # WHEN the running one's pid looks reused (another start time than the one first seen): THEN it is not
        ctx._started[running.pid] += 1
        assert ctx.alive() == []
    finally:
        running.kill()
        running.wait()
        zombie.wait()
    # AND once gone, gone
    assert _ctx(tmp_path, (running.pid,)).alive() == []


def test_periodic_stack_rounds_are_left_out_while_steps_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a stack sampler in watch mode (rounds_while_stepping off), its rounds counted instead of run
    ctx = _ctx(tmp_path)
    stacks = StackSampler(pyspy="py-spy", rounds_while_stepping=False)
    taken: list[int] = []
    monkeypatch.setattr(StackSampler, "_periodic", lambda self, ctx, confirming=False: taken.append(1))
    # WHEN no step ever came: THEN each look takes a round (the stack half of the hang rule)
    stacks.sample(ctx)
    stacks.sample(ctx)
    assert len(taken) == 2
    # WHEN a step comes between two looks: THEN that look is left out; the next, with no new step, takes one
    ctx.progress.steps.last_step_ns[0] = time.time_ns() + 1
    stacks.sample(ctx)
    assert len(taken) == 2 and stacks.skipped == 1 and "left out while steps came" in stacks.status()
    stacks.sample(ctx)
    assert len(taken) == 3


class _HostCounter(NoDiagnosis):
    def __init__(self) -> None:
        self.asked = 0

    def host_alarm(self, store: Store) -> Alarm | None:
        self.asked += 1
        return None


def test_a_link_state_record_or_an_xid_runs_the_host_check_at_once(tmp_path: Path) -> None:
    # GIVEN a watcher whose periodic host check is an hour away, and a net counters file with one sample
    diagnosis = _HostCounter()
    ctx = _ctx(tmp_path, diagnosis=diagnosis)
    net = ctx.run_dir / "counters" / "node-a.net.jsonl"
    net.parent.mkdir(parents=True)
    net.write_text(json.dumps({"ts_ns": 1, "host": "node-a", "ifaces": {"eth0": {"operstate": "up"}}}) + "\n")
    watch = WatchSampler(options=WatchOptions(host_check_s=3600))
    watch.start(ctx)
    watch.sample(ctx)
    # WHEN another ordinary sample is appended: THEN no host check
    with open(net, "a") as out:
        out.write(json.dumps({"ts_ns": 2, "host": "node-a", "ifaces": {"eth0": {"operstate": "up"}}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    assert diagnosis.asked == 0
    # WHEN another node sharing the run directory records a flap of its own link: THEN not judged here (its
    # own watcher does)
    other = ctx.run_dir / "counters" / "node-b.net.jsonl"
    other.write_text(json.dumps({"ts_ns": 2, "host": "node-b", "ifaces": {"eth0": {"operstate": "up"}}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    with open(other, "a") as out:
        out.write(json.dumps({"ts_ns": 3, "host": "node-b", "changed_within_s": 2.0,
                              "ifaces": {"eth0": {"operstate": "down", "carrier": 0}}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    assert diagnosis.asked == 0
    # WHEN the net sampler's link watcher records a state change (a flap): THEN the host check runs at that look
    with open(net, "a") as out:
        out.write(json.dumps({"ts_ns": 3, "host": "node-a", "changed_within_s": 2.0,
                              "ifaces": {"eth0": {"operstate": "down", "carrier": 0}}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    assert diagnosis.asked == 1
    # WHEN a GPU sample without an XID, then one with an XID, is appended: THEN a check at the second only
    gpu = ctx.run_dir / "counters" / "node-a.gpu.jsonl"
    gpu.write_text(json.dumps({"ts_ns": 4, "gpu": 0, "metrics": {"xid": []}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    with open(gpu, "a") as out:
        out.write(json.dumps({"ts_ns": 5, "gpu": 0, "metrics": {"xid": []}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    assert diagnosis.asked == 1
    with open(gpu, "a") as out:
        out.write(json.dumps({"ts_ns": 6, "gpu": 0, "metrics": {"xid": [79]}}) + "\n")
    watch.hosts.next_urgent_look = 0.0
    watch.sample(ctx)
    assert diagnosis.asked == 2


class _Busy:
    name, interval_s = "busy", 0.05

    def start(self, ctx: LiveContext) -> None: ...

    def sample(self, ctx: LiveContext) -> None:
        sum(range(20000))

    def stop(self, ctx: LiveContext) -> None: ...

    def status(self) -> str:
        return ""


def test_the_host_manifest_says_where_the_sessions_cpu_went(tmp_path: Path) -> None:
    # GIVEN a session of 0.3 s with one collector that works at each look
    from rich.console import Console

    from perftracker.live.session import run_session

    ctx = _ctx(tmp_path)
    ctx.run_dir.mkdir(parents=True)
    run_session(ctx, [_Busy()], 0.3, Console(quiet=True), show_live=False, tick_s=0.05)
    # THEN its manifest has that collector's CPU seconds, the process's and its children's, each thread's own
    # (the collector's thread among them) and the garbage collector's passes per generation
    cpu = json.loads((ctx.run_dir / "manifests" / "node-a.json").read_text())["cpu_s"]
    assert set(cpu) == {"collectors", "process", "children", "threads", "gc"} and set(cpu["collectors"]) == {"busy"}
    assert 0 < cpu["collectors"]["busy"] <= cpu["process"]
    assert "perftracker-busy" in cpu["threads"] and "MainThread" in cpu["threads"]
    assert len(cpu["gc"]["passes"]) == 3 and all(n >= 0 for n in cpu["gc"]["passes"])


def test_the_net_sampler_reads_queue_stats_at_most_every_qdisc_every_s(tmp_path: Path) -> None:
    # GIVEN one interface in a fake sysfs, a queue-stats reader that counts its calls, and the watch's 300 s
    from perftracker.live.samplers.netdev_sampler import NetdevSampler

    base = tmp_path / "sys" / "class" / "net" / "eth0"
    (base / "statistics").mkdir(parents=True)
    (base / "operstate").write_text("up\n")
    (base / "statistics" / "tx_packets").write_text("10\n")
    calls: list[str] = []

    def reader(name: str) -> dict[str, int]:
        calls.append(name)
        return {"drops": 0}

    ctx = _ctx(tmp_path)
    ctx.sysfs_root = tmp_path / "sys"
    net = NetdevSampler(ifaces={"eth0": ""}, qdisc_reader=reader, qdisc_every_s=300.0, watch_s=0)
    # WHEN three samples are taken in a row
    for _ in range(3):
        net._take(ctx)
    # THEN the queue stats were read once, into the first sample only; the interface's counters are in all
    records = [json.loads(line) for line in (ctx.run_dir / "counters" / "node-a.net.jsonl").read_text().splitlines()]
    assert calls == ["eth0"] and ["qdisc" in r["ifaces"]["eth0"] for r in records] == [True, False, False]
    assert all(r["ifaces"]["eth0"]["counters"]["tx_packets"] == 10 for r in records)
    # AND with the default (0) every sample has them
    every = NetdevSampler(ifaces={"eth0": ""}, qdisc_reader=reader, watch_s=0)
    every._take(ctx)
    every._take(ctx)
    assert len(calls) == 3


def test_under_watch_nccl_logs_and_inspector_output_are_copied_every_5_s_and_otherwise_every_second() -> None:
    # GIVEN attach's default options, and the same under --watch
    from perftracker.live.collectors import SamplerOptions, build_samplers, watch_rates

    def intervals(options: SamplerOptions) -> dict[str, float]:
        options.stacks = options.net = options.gpu = options.rdma = options.env = options.steps = False
        return {s.name: s.interval_s for s in build_samplers(options)}

    # THEN the log and Inspector copies run every second, under --watch every 5 s
    assert intervals(SamplerOptions()) == {"logs": 1.0, "inspector": 1.0}
    assert intervals(watch_rates(SamplerOptions())) == {"logs": 5.0, "inspector": 5.0}


def test_watch_rates_returns_new_options_and_leaves_its_argument_as_it_was() -> None:
    # GIVEN attach's options with a 5 s GPU interval and a start-up stack recording
    from dataclasses import asdict

    from perftracker.live.collectors import SamplerOptions, watch_rates

    given = SamplerOptions(interval_s=5.0, profile_seconds=10.0)
    before = asdict(given)
    # WHEN the steady rates of --watch are taken
    steady = watch_rates(given)
    # THEN the new options have them, and the options given are unchanged
    assert (steady.interval_s, steady.profile_seconds, steady.stack_rounds_while_stepping) == (10.0, 0.0, False)
    assert steady is not given and asdict(given) == before
