"""The watcher's host check: when to judge this host's latest counters, and the judging through the seam.

`HostCheck(every_s).look(ctx)` judges this host's counter files' tails through `ctx.diagnosis.host_alarm`
every `every_s`, or at once when a link state change or an XID was recorded; the same counters are not
judged twice. A partial record becomes a note.
"""

from __future__ import annotations

import glob
import re
import shutil
import tempfile
import time
from pathlib import Path

from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.live.sampler import LiveContext
from perftracker.live.samplers.follow import LineTail
from perftracker.live.watch.incidents import COUNTERS_TAIL_BYTES, copy_tail
from perftracker.store.alarms import Alarm

RESCAN_S = 5.0  # the counters' new bytes are looked at for urgent signals this often
# Host signals judged at once: a link state record (only the net sampler's link watcher writes this key,
# netdev.state_record), an XID (a GPU sample's non-empty "xid" list, nvml_sampler)
URGENT = re.compile(rb'"changed_within_s"|"xid":\s*\[\s*\d')


def own_counters(ctx: LiveContext, kind: str = "*") -> list[Path]:
    """This host's counter files (`counters/<host>.<kind>.jsonl`; kind net, gpu, rdma or * for all): in a run directory the watchers of several nodes
    share, each judges its own host's signals (another node's flap is that node's watcher's incident)."""
    return list((ctx.run_dir / "counters").glob(f"{glob.escape(ctx.host)}.{kind}.jsonl"))


class HostCheck:
    """When the watcher judges the host's counters (periodically, or at once on an urgent signal), and how."""

    __slots__ = ("every_s", "next_check", "next_urgent_look", "_tails", "_sizes")

    def __init__(self, every_s: float = 600.0) -> None:
        self.every_s = every_s
        self.next_check = 0.0  # monotonic time of the next periodic check
        self.next_urgent_look = 0.0  # monotonic time the counters' new bytes are looked at next
        self._tails: dict[Path, LineTail] = {}
        self._sizes: tuple[int, ...] = ()

    def start(self) -> None:
        self.next_check = time.monotonic() + self.every_s

    def look(self, ctx: LiveContext) -> Alarm | None:
        """The host alarm when a check is due and finds one, else None."""
        if time.monotonic() < self.next_check and not self._urgent(ctx):
            return None
        self.next_check = time.monotonic() + self.every_s
        return self._judge(ctx)

    def _urgent(self, ctx: LiveContext) -> bool:
        if time.monotonic() < self.next_urgent_look:
            return False
        self.next_urgent_look = time.monotonic() + RESCAN_S
        for path in [*own_counters(ctx, "net"), *own_counters(ctx, "gpu")]:
            if path not in self._tails:  # from its end: what was there is judged by the periodic check
                self._tails[path] = LineTail(path, path.stat().st_size)
        return any(URGENT.search(line) for tail in self._tails.values() for line in tail.read_lines())

    def _judge(self, ctx: LiveContext) -> Alarm | None:
        files = sorted(own_counters(ctx))
        sizes = tuple(f.stat().st_size for f in files if f.is_file())
        if not files or sizes == self._sizes:
            return None
        self._sizes = sizes
        tmp = Path(tempfile.mkdtemp(prefix="perftracker-watch-"))
        try:
            for f in files:
                copy_tail(f, tmp / "counters" / f.name, COUNTERS_TAIL_BYTES // 4)
            store = load_path(tmp, LoadOptions(cache_dir=None, workers=1))
            return ctx.diagnosis.host_alarm(store)
        except Exception as exc:  # noqa: BLE001  a partial record must not stop the watch
            ctx.note(f"watch: host counters not judged ({type(exc).__name__}: {exc})")
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()
