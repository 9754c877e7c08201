"""Which step-file phases include waiting for the other ranks, not only a rank's own work.

Promise: `WAITING_PHASES` names them (DDP's gradient all-reduce runs inside `backward`, and explicit
`wait`/`allreduce`/`comm` phases are waiting by name); `is_waiting_phase(name)` tells one phase. A
rank that spends longer in such a phase may be the one that waits (it was faster elsewhere), so the
step rules never name a straggler from these phases alone.
"""

from __future__ import annotations

WAITING_PHASES = ("backward", "wait", "allreduce", "comm")


def is_waiting_phase(name: str) -> bool:
    return name.strip().lower() in WAITING_PHASES
