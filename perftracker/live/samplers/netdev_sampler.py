"""Sample the Ethernet interfaces the job uses, and the node's TCP counters, into `counters/<host>.net.jsonl`.

The first sample is taken in `start`, then one about every `interval_s`, each appended and flushed at once;
a thread records link state changes between samples (every `watch_s`). The interfaces are those the job's
socket settings and peer routes select, looked up again every `resolve_every_s`; until one is known, all but
`lo`. The record format is `collectors/counters/netdev.py`'s.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftracker.collectors.counters.netdev import (
    QdiscReader,
    interface_names,
    read_qdisc,
    read_state,
    snapshot,
    state_record,
)
from perftracker.collectors.counters.netroutes import (
    iface_addresses,
    job_interfaces,
    local_addresses,
    peer_addresses,
    peers_by_iface,
    read_routes,
    settings_of,
)
from perftracker.live.sampler import LiveContext
from perftracker.rundir import append_jsonl

MAX_FALLBACK = 16


@dataclass(slots=True, eq=False)
class NetdevSampler:
    name = "net"
    interval_s: float = 1.0
    resolve_every_s: float = 5.0
    proc_root: Path = Path("/proc")
    qdisc_reader: QdiscReader | None = None
    ifaces: dict[str, str] = field(default_factory=dict)  # name -> why the job uses it ("" unknown)
    watch_s: float = 0.1
    qdisc_every_s: float = 0.0  # queue stats (`tc`, ~5 ms of CPU per interface) at most this often; 0: every sample
    samples: int = field(default=0, init=False)
    peers: dict[str, list[str]] = field(default_factory=dict, init=False)
    _chosen: bool = field(default=False, init=False)
    _last_resolve: float = field(default=-1e9, init=False)
    _last_sample: float = field(default=-1e9, init=False)
    _last_qdisc: float = field(default=-1e9, init=False)
    _states: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _watcher: threading.Thread | None = field(default=None, init=False)

    def start(self, ctx: LiveContext) -> None:
        if self.qdisc_reader is None:
            if shutil.which("tc") is None:
                ctx.note("net: `tc` not found (iproute2): queue drops and overlimits of the job's interfaces are "
                         "not sampled, only their sysfs counters")
            else:
                self.qdisc_reader = read_qdisc
        self._resolve(ctx)
        self._take(ctx)
        if self.watch_s > 0:
            self._watcher = threading.Thread(target=self._watch, args=(ctx,), name="perftracker-net-watch",
                                             daemon=True)
            self._watcher.start()

    def _append(self, ctx: LiveContext, record: Mapping[str, Any]) -> None:
        with self._lock:
            append_jsonl(ctx.run_dir / "counters" / f"{ctx.host}.net.jsonl", record)

    def _watch(self, ctx: LiveContext) -> None:
        while not self._stop.wait(self.watch_s):
            changed = {}
            for name in list(self.ifaces):
                state = read_state(ctx.sysfs_root, name)
                if state is not None and self._states.get(name) not in (None, state):
                    changed[name] = state
                if state is not None:
                    self._states[name] = state
            if changed:
                try:
                    self._append(ctx, state_record(ctx.host, changed, self.watch_s))
                except OSError as exc:
                    ctx.note(f"net: could not write a link state change ({exc})")

    def _resolve(self, ctx: LiveContext) -> None:
        self._last_resolve = time.monotonic()
        pids = [w.pid for w in ctx.alive()] + ([ctx.job.launcher_pid] if ctx.job.launcher_pid else [])
        settings = settings_of(pids)
        peers = peer_addresses(pids)
        master = settings.get("MASTER_ADDR", "")
        with contextlib.suppress(ValueError):  # an address (not a host name) is a peer
            ipaddress.ip_address(master)
            peers.add(master)
        names = interface_names(ctx.sysfs_root)
        routes = read_routes(self.proc_root)
        local = local_addresses()
        found = job_interfaces(settings, peers, names, routes, local)
        for iface, addrs in peers_by_iface(peers, routes, local).items():
            known = self.peers.setdefault(iface, [])
            known.extend(a for a in addrs if a not in known)
        if found:
            if not self._chosen:
                self.ifaces = {}
                self._chosen = True
            self.ifaces.update(found)
        elif not self._chosen:
            fallback = [n for n in names if n != "lo"]
            if len(fallback) > MAX_FALLBACK and not self.ifaces:
                ctx.note(f"net: the job's interfaces are not known yet (no NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, "
                         f"no connections to peers); sampling the first {MAX_FALLBACK} of {len(fallback)}")
            self.ifaces = {n: "" for n in fallback[:MAX_FALLBACK]}

    def _take(self, ctx: LiveContext) -> None:
        self._last_sample = time.monotonic()
        qdisc = self.qdisc_reader if self._last_sample - self._last_qdisc >= self.qdisc_every_s else None
        if qdisc is not None:
            self._last_qdisc = self._last_sample
        record = snapshot(ctx.host, self.ifaces, ctx.sysfs_root, self.proc_root, qdisc,
                          peers=self.peers, addresses=iface_addresses())
        for name, data in record["ifaces"].items():
            self._states.setdefault(name, {k: data.get(k) for k in ("operstate", "carrier", "admin_up")})
        self._append(ctx, record)
        self.samples += 1

    def sample(self, ctx: LiveContext) -> None:
        now = time.monotonic()
        if now - self._last_sample < self.interval_s / 2:  # the first loop turn right after `start`
            return
        if now - self._last_resolve >= self.resolve_every_s:
            self._resolve(ctx)
        self._take(ctx)

    def stop(self, ctx: LiveContext) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=2)
        if not self._chosen and self.samples:
            ctx.note("net: no interface could be tied to the job (no socket setting, no connection to a peer): "
                     f"sampled {', '.join(self.ifaces) or 'none'} without knowing which the job uses")

    def status(self) -> str:
        names = ", ".join(f"{n}" for n in list(self.ifaces)[:4]) + (" ..." if len(self.ifaces) > 4 else "")
        return f"{len(self.ifaces)} interface(s) ({names or 'none'}), {self.samples} sample(s)"
