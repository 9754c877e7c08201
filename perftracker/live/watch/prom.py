"""`--prom FILE|[HOST]:PORT` of `attach --watch` / `run --watch`: the watch state as Prometheus metrics.

`PromPublisher(target)` renders a `WatchState` in the Prometheus text format and rewrites FILE atomically or
serves it at `http://HOST:PORT/metrics` (127.0.0.1 unless a host is given).
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from perftracker.live.watch.watcher import WatchState
from perftracker.rundir import atomic_write_text
from perftracker.store.alarms import KINDS

_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]*):(?P<port>\d{1,5})$")


def metrics_text(state: WatchState) -> str:
    out: list[str] = []

    def metric(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
        out.extend(f"{name}{labels} {value:.6g}" for labels, value in samples)

    currents = sorted(state.current_s.values())
    metric("perftracker_step_time_seconds", "Median across ranks of the mean of the last N steps.",
           [("", currents[len(currents) // 2])] if currents else [])
    metric("perftracker_rank_step_time_seconds", "Mean of the last N steps of each rank.",
           [(f'{{rank="{r}"}}', v) for r, v in sorted(state.current_s.items())])
    top = max(state.last_step.values(), default=0)
    metric("perftracker_rank_lag_steps", "Steps behind the most advanced rank.",
           [(f'{{rank="{r}"}}', float(top - s)) for r, s in sorted(state.last_step.items())])
    metric("perftracker_incidents_total", "Incidents opened by the watcher, by kind.",
           [(f'{{kind="{k}"}}', float(sum(1 for _, kind, _ in state.incidents if kind == k))) for k in KINDS])
    metric("perftracker_last_incident_timestamp_seconds", "When the last incident opened (epoch seconds).",
           [("", state.incidents[-1][0])] if state.incidents else [])
    metric("perftracker_watch_armed", "1 once the rules are armed (baseline known).", [("", float(state.armed))])
    return "\n".join(out) + "\n"


def parse_target(target: str) -> tuple[str, int] | None:
    """(host, port) for `[HOST]:PORT`, None for a file path."""
    match = _PORT.match(target)
    if not match or not 0 <= int(match["port"]) < 65536:  # 0: any free port
        return None
    return match["host"] or "127.0.0.1", int(match["port"])


class PromPublisher:
    def __init__(self, target: str) -> None:
        self.text = metrics_text(WatchState())
        self.address = parse_target(target)
        self.path = None if self.address else Path(target)
        self.server: ThreadingHTTPServer | None = None
        if self.address is not None:
            publisher = self

            class Handler(BaseHTTPRequestHandler):
                def do_GET(self) -> None:  # noqa: N802  (http.server's name)
                    body = publisher.text.encode()
                    self.send_response(200 if self.path in ("/", "/metrics") else 404)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                    return

            self.server = ThreadingHTTPServer(self.address, Handler)
            self.server.daemon_threads = True
            threading.Thread(target=self.server.serve_forever, name="perftracker-prom", daemon=True).start()

    def __call__(self, state: WatchState) -> None:
        self.text = metrics_text(state)
        if self.path is not None:
            atomic_write_text(self.path, self.text)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
