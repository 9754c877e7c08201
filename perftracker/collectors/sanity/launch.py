"""Where this process stands in the job `perftracker sanity` was launched as, checked before anything starts.

Promise: `Launch.from_env(env)` reads rank, world size, local rank and rendezvous from the launcher's variables
and raises a `UsageError` naming a variable whose value is not usable; `check_rendezvous(launch, within_s)`
names an address that does not resolve or a rendezvous nothing answers at, instead of torch's retries.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from perftracker.errors import UsageError
from perftracker.launcher_env import LOCAL_RANK_VARS, RANK_VARS, WORLD_VARS

MAX_WORLD = 1 << 20  # ranks: far beyond any cluster; a larger figure is a typo or a stray variable
_RANK_HINT = "check the launcher's rank variables (torchrun sets RANK, WORLD_SIZE and LOCAL_RANK)"


class RendezvousError(RuntimeError):
    """Nothing answered at the rendezvous (MASTER_ADDR:MASTER_PORT) within the time allowed."""


def _whole(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, int] | None:
    """(variable, value) of the first of `names` that is set (non-empty), or None; UsageError naming it when its
    value is not a whole number."""
    for name in names:
        raw = env.get(name, "").strip()
        if not raw:
            continue
        text = raw[1:] if raw[:1] in "+-" else raw
        if not (text.isascii() and text.isdigit()) or len(text) > 12:
            raise UsageError(f"{name}={raw[:40]!r} is not a whole number", name, _RANK_HINT)
        return name, int(raw)
    return None


@dataclass(frozen=True)
class Launch:
    """Where this process stands in the job."""

    rank: int
    world: int
    local_rank: int
    master_addr: str = ""
    master_port: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Launch:
        world_var = _whole(env, WORLD_VARS)
        rank_var = _whole(env, RANK_VARS)
        local_var = _whole(env, LOCAL_RANK_VARS)
        world = world_var[1] if world_var else 1
        if world_var and not 1 <= world <= MAX_WORLD:
            raise UsageError(f"{world_var[0]}={world} is not a world size (1 to {MAX_WORLD} ranks)", world_var[0],
                             _RANK_HINT)
        rank = rank_var[1] if rank_var else 0
        if rank_var and not 0 <= rank < world:
            raise UsageError(f"{rank_var[0]}={rank} is not a rank of a world of {world} "
                             f"({world_var[0] if world_var else 'no world size set'}: ranks 0 to {world - 1})",
                             rank_var[0], _RANK_HINT)
        local = local_var[1] if local_var else 0
        if local_var and not 0 <= local < world:
            raise UsageError(f"{local_var[0]}={local} is not a local rank of a world of {world}", local_var[0],
                             _RANK_HINT)
        addr = env.get("MASTER_ADDR", "").strip()
        raw_port = env.get("MASTER_PORT", "").strip()
        port = 0
        if raw_port:
            if not (raw_port.isascii() and raw_port.isdigit() and len(raw_port) <= 5 and 1 <= int(raw_port) <= 65535):
                raise UsageError(f"MASTER_PORT={raw_port[:40]!r} is not a port number (1 to 65535)", "MASTER_PORT",
                                 "export MASTER_PORT as a free TCP port on the first node, e.g. 29500")
            port = int(raw_port)
        if world > 1:
            missing = [name for name, value in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if not value]
            if missing:
                raise UsageError(f"rank {rank} of {world}: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'}"
                                 " not set", missing[0], "launch with torchrun, or export MASTER_ADDR (the first "
                                 "node) and MASTER_PORT under srun / mpirun")
        return cls(rank, world, local, addr, port)


def _resolve(addr: str, within_s: float) -> bool | None:
    """True when `addr` resolves, False when it does not, None when resolving took longer than `within_s`."""
    found: list[bool] = []

    def look() -> None:
        try:
            socket.getaddrinfo(addr, None)
            found.append(True)
        except (OSError, UnicodeError):
            found.append(False)

    worker = threading.Thread(target=look, name="sanity-resolve", daemon=True)
    worker.start()
    worker.join(within_s)
    return found[0] if found else None


def check_rendezvous(launch: Launch, within_s: float, store_up: bool) -> None:
    """See the module docstring. `store_up`: a rendezvous store is already listening at the address (torchrun's
    agent hosts it, or this rank is not the one that hosts it), so it must answer a connection."""
    if launch.world <= 1:
        return
    resolved = _resolve(launch.master_addr, min(10.0, within_s))
    if resolved is False:
        raise UsageError(f"MASTER_ADDR={launch.master_addr!r} does not resolve to an address", "MASTER_ADDR",
                         "give the first node's host name or IP address (as every node resolves it)")
    if resolved is None:
        raise RendezvousError(f"MASTER_ADDR={launch.master_addr!r} did not resolve within {min(10.0, within_s):g} s")
    if not store_up:
        return
    deadline = time.monotonic() + within_s
    why = ""
    while True:
        try:
            with socket.create_connection((launch.master_addr, launch.master_port),
                                          timeout=max(0.5, min(3.0, deadline - time.monotonic()))):
                return
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
        if time.monotonic() >= deadline:
            raise RendezvousError(f"nothing answered at the rendezvous MASTER_ADDR:MASTER_PORT = "
                                  f"{launch.master_addr}:{launch.master_port} within {within_s:g} s ({why})")
        time.sleep(0.5)
