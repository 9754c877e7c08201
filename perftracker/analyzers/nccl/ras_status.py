"""What NCCL's RAS client reported, typed (`ras_records`): dead processes, ranks missing from communicators,
communicator errors."""

from __future__ import annotations

from dataclasses import dataclass

from perftracker.store import Store


@dataclass(frozen=True)
class RasRecord:
    kind: str  # dead | missing_process | missing_rank | comm_error | comm_mismatch | comm_group | timeout
    comm: str
    rank: int
    host: str
    pid: int
    gpu: str
    detail: str
    where: str

    def process(self) -> str:
        if self.pid < 0:
            return f"rank {self.rank} of communicator {self.comm}" if self.comm else "a process"
        gpu = f" (GPU {self.gpu})" if self.gpu else ""
        return f"process {self.pid} on {self.host or '?'}{gpu}"


def ras_records(store: Store) -> list[RasRecord]:
    """The RAS rows of the Store, typed."""
    frame = store["nccl_ras"]
    if frame.empty:
        return []
    cols = [frame[c].astype(object).tolist() for c in ("kind", "comm", "rank", "host", "pid", "gpu", "detail", "file",
                                                       "line")]
    return [RasRecord(str(k), str(c or ""), int(str(r)), str(h or ""), int(str(p)), str(g or ""), str(d or ""),
                      f"{f}:{int(str(ln))}" if int(str(ln)) > 0 else str(f))
            for k, c, r, h, p, g, d, f, ln in zip(*cols)]
