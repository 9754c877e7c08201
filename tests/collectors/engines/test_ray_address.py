"""An address that does not answer as Ray is refused within seconds (the probe: a silent, an HTTP and an
accept-and-close listener passed the 5 s TCP probe, then Ray retried for over 300 s). Each listener is
a local socket on 127.0.0.1; the refusal must come from perftracker, before Ray is ever asked."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from perftracker.collectors.engines.ray_engine import check_reachable
from perftracker.errors import UsageError


def _serve(behaviour: str) -> Iterator[str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    held: list[socket.socket] = []

    def loop() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            if behaviour == "close":
                conn.close()
            elif behaviour == "http":
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                held.append(conn)
            elif behaviour == "grpc":  # answers the preface with an empty SETTINGS frame, as gRPC does
                conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                held.append(conn)
            else:  # silent: accepts and says nothing
                held.append(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(request.param)


@pytest.mark.parametrize("listener", ["silent", "http", "close"], indirect=True)
def test_a_listener_that_is_not_ray_is_refused_within_seconds(listener: str) -> None:
    start = time.perf_counter()
    with pytest.raises(UsageError, match="not Ray|no Ray cluster answers there"):
        check_reachable(listener, timeout_s=2.0)
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("listener", ["grpc"], indirect=True)
def test_a_grpc_server_passes_the_greeting(listener: str) -> None:
    check_reachable(listener, timeout_s=2.0)  # no error: Ray is then asked to join it


def test_a_trace_whose_ray_task_died_with_its_node_is_parsed_here(tmp_path: Path) -> None:
    # GIVEN a trace whose Ray task failed for good (as when the raylet of its node is lost: the probe lost
    # 1,634 of 2,000 traces with "1 warning" and exit 0)
    from synth import SynthSpec, generate

    from perftracker.collectors.engines import MapArgs
    from perftracker.collectors.engines.ray_engine import _result_of

    generate(SynthSpec(ranks=1, steps=2, kernels_per_step=4, collectives_per_step=1, seed=2), tmp_path / "t",
             gzip=False, truth_path=tmp_path / "truth.json")
    path = str(next((tmp_path / "t").glob("rank-*.json")))

    class RayError(Exception):
        pass

    class FakeRay:
        exceptions = SimpleNamespace(RayError=RayError)

        @staticmethod
        def get(ref: object) -> object:
            raise RayError("The node with node id abc123 and address 10.0.0.7 has been marked dead")

    # WHEN its result is collected THEN the trace is parsed on the driver, with a note naming the failure
    result = _result_of(FakeRay, "ref", path, MapArgs(cache_dir=None))
    assert result.ok and result.events is not None and len(result.events)
    assert any("10.0.0.7 has been marked dead" in m and "parsed on this machine" in m for m, _ in result.notes)
    # AND a file the driver cannot see either is an error note naming the node's failure
    gone = _result_of(FakeRay, "ref", str(tmp_path / "elsewhere.json"), MapArgs(cache_dir=None))
    assert not gone.ok and "marked dead" in gone.error and "not analyzed" in gone.error
