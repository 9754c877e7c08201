"""The Ray engine: the map step as Ray tasks, for jobs whose traces one machine should not parse alone.

Promise: `RayEngine(address, workers).map(paths, args, progress)` joins (or starts) a Ray, runs one task per
trace calling `trace_map.load_one`, and returns the same results in the order of the paths as the local
engine. Errors a person can act on are `UsageError`s (exit 2); a failed task is parsed on the driver instead.
Where the tables travel and what fails how: docs/internals/collectors.md.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from perftracker.collectors.engines import MapArgs, Progress
from perftracker.collectors.engines.interrupt_watchdog import interrupt_watchdog
from perftracker.collectors.traces.trace_cache import CACHE_VERSION
from perftracker.collectors.traces.trace_map import FileResult, load_one
from perftracker.errors import UsageError

CONNECT_TIMEOUT_S = 5.0
TASK_RETRIES = 2
INSTALL_HINT = "install it with pip install 'perftracker-dl[ray]' (or pip install ray), or use the default --engine local"


def map_task(path: str, args: MapArgs, probe: str) -> tuple[str, FileResult]:
    """One Ray task: (this worker's CACHE_VERSION, the trace's result), the tables in the result unless
    this node sees the driver's cache folder (the probe file)."""
    if not os.path.exists(path):
        from ray.util import get_node_ip_address  # this runs in a Ray worker: the node is Ray's to name

        node: str = get_node_ip_address()  # type: ignore[no-untyped-call]
        return CACHE_VERSION, FileResult(path, False, error=(
            f"{path}: not found on Ray node {node}. The Ray engine reads each trace at the same "
            "path on every node: put the traces on storage every node sees (a shared filesystem), or use "
            "--engine local."))
    shared_cache = bool(probe) and os.path.exists(probe)
    return CACHE_VERSION, load_one(path, args.cache_dir, args.comm_kernel_files, args.comm_kernel_patterns,
                                   tables_in_result=not shared_cache)


def import_ray() -> ModuleType:
    """The `ray` module, or the UsageError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(f"the Ray engine needs the ray package, which is not installed here ({exc})",
                         "--engine ray", INSTALL_HINT) from None
    return ray


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A UsageError unless something accepts a TCP connection at `address` (host:port, or ray://host:port)."""
    bare = address.removeprefix("ray://")
    host, _, port_text = bare.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError("is not a Ray cluster address", f"Ray address {address!r}",
                         "give the head node as HOST:PORT (its GCS port, 6379 by default), ray://HOST:10001 for Ray "
                         "Client, auto for a Ray started on this machine with ray start, or no address to start "
                         "one for this command")
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout_s) as conn:
            answer = _grpc_answer(conn, timeout_s)
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise UsageError(f"no Ray cluster answers there ({reason} within {timeout_s:.0f} s)", f"Ray address {address}",
                         "start one there (ray start --head), check the host and port (RAY_ADDRESS or "
                         "--ray-address), or leave the address out to start Ray on this machine") from None
    if answer:
        raise UsageError(f"what answers there is not Ray ({answer})", f"Ray address {address}",
                         "give the head node's GCS port (6379 by default) or ray://HOST:10001, or leave the "
                         "address out to start Ray on this machine")


# Ray's GCS and Ray Client speak gRPC, i.e. HTTP/2: to a client's connection preface a server answers
# with a SETTINGS frame (9-byte header, type 4) at once. A silent listener, an HTTP/1 server or one that
# closes the connection does not, and is refused here in seconds (Ray's own retries take minutes).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _grpc_answer(conn: socket.socket, timeout_s: float) -> str:
    """"" when the peer answers an HTTP/2 preface as a gRPC server does, else what it did instead."""
    conn.settimeout(timeout_s)
    conn.sendall(_H2_PREFACE)
    header = b""
    try:
        while len(header) < 9:
            chunk = conn.recv(9 - len(header))
            if not chunk:
                return "it closed the connection without a word" if not header else "it answered too little"
            header += chunk
    except TimeoutError:
        return f"no answer to a gRPC greeting within {timeout_s:.0f} s"
    if header[3] != 4:
        return f"it answered {header[:9]!r}, not gRPC (HTTP/2)"
    return ""


@dataclass(frozen=True)
class RayEngine:
    address: str = ""  # "": start a Ray on this machine for the command
    workers: int = 0  # CPUs of that Ray (0: all); a cluster's own resources otherwise

    def map(self, paths: Sequence[str], args: MapArgs, progress: Progress) -> list[FileResult]:
        ray = import_ray()
        if args.cache_dir is not None:  # the tasks' working folder is not this one
            args = replace(args, cache_dir=args.cache_dir.absolute())
        # Ray's connect and waits can hold the interpreter in C++ (a stuck raylet): Ctrl-C still stops the command
        with interrupt_watchdog("joining or waiting for Ray" if self.address else "running Ray on this machine"):
            started = self._connect(ray)
            probe = _leave_probe(args.cache_dir)
            try:
                return self._run(ray, paths, args, probe, progress)
            finally:
                if probe:
                    Path(probe).unlink(missing_ok=True)
                if started:
                    ray.shutdown()

    def _connect(self, ray: ModuleType) -> bool:
        """Join (or start) Ray; True when this call did, so that `map` disconnects afterwards."""
        if ray.is_initialized():
            return False
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        where = f"Ray address {self.address}" if self.address else "--engine ray"
        if self.address and self.address != "auto":
            check_reachable(self.address)
        try:
            if self.address:
                ray.init(address=self.address, **quiet)
            else:
                ray.init(address="local", num_cpus=self.workers or None, include_dashboard=False, **quiet)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            raise UsageError(f"Ray could not be started or joined ({_first_line(exc)})", where,
                             "check the address (RAY_ADDRESS or --ray-address) and that the cluster runs the "
                             "same Ray version, or use --engine local") from None
        return True

    def _run(self, ray: ModuleType, paths: Sequence[str], args: MapArgs, probe: str,
             progress: Progress) -> list[FileResult]:
        n = len(paths)
        progress(0, n)
        task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(map_task)
        refs = [task.remote(os.path.abspath(path), args, probe) for path in paths]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[FileResult | None] = [None] * n
        pending, done = refs, 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            if pending:  # everything else that finished meanwhile, without waiting
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                ready = [*ready, *more]
            for ref in ready:
                i = index[ref]
                results[i] = _result_of(ray, ref, paths[i], args)
            done += len(ready)
            progress(done, n)
        return [r for r in results if r is not None]


def _result_of(ray: ModuleType, ref: Any, path: str, args: MapArgs) -> FileResult:
    try:
        version, result = cast(tuple[str, FileResult], ray.get(ref))
    except ray.exceptions.RayError as exc:  # a node lost, a worker killed: parse it here rather than lose it
        return _parsed_here(path, args, _first_line(exc))
    if version != CACHE_VERSION:
        raise UsageError(f"the cluster's workers run perftracker {version}, this is {CACHE_VERSION}",
                         "--engine ray", "install the same perftracker version on every node")
    result.path = path
    return result


def _parsed_here(path: str, args: MapArgs, why: str) -> FileResult:
    """The trace parsed on the driver after its Ray task failed (`why`), with a note saying so; an error
    naming the failure when the driver cannot read it either."""
    lost = (f"{path}: the Ray task that loads it failed after {TASK_RETRIES} retries ({why})")
    if not os.path.exists(path):
        return FileResult(path, False, error=f"{lost}, and this machine does not see the file: not analyzed. "
                          "Look at the cluster's Ray logs; analyze again (what was cached is kept), or use "
                          "--engine local.")
    result = load_one(os.path.abspath(path), args.cache_dir, args.comm_kernel_files, args.comm_kernel_patterns,
                      tables_in_result=True)
    result.path = path
    if result.ok:
        result.notes.append((f"{lost}; parsed on this machine instead", {}))
    return result


def _leave_probe(cache_dir: Path | None) -> str:
    """A file in the cache folder by which each task tells whether its node sees this folder ("" when
    there is no cache or it cannot be written)."""
    if cache_dir is None:
        return ""
    probe = cache_dir.absolute() / f".engine-probe-{uuid.uuid4().hex}"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        probe.touch()
    except OSError:
        return ""
    return str(probe)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
