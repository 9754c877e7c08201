"""When rank 0 dies during `perftracker sanity`, the lowest live rank writes the result (real processes).

Four plain processes on this machine, launched as srun / mpirun would (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/PORT exported) and given two node names (PERFTRACKER_HOST: ha for ranks 0-1, hb for 2-3): rank 0
hosts the rendezvous store, as it does without torchrun. Node ha's two processes are killed once rank 0 has
joined, so the store dies with them; rank 2 must write OUT over the group of hb's ranks, naming ha unreachable.
(The namespace lab's recorded case x2/kill0 is the same under torchrun across three nodes.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.live.attach.test_run import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_rank_0_s_node_killed_mid_check_the_lowest_live_rank_writes_naming_it_unreachable(tmp_path: Path) -> None:
    # GIVEN four ranks of a check with a 6 s box on two named nodes
    out, port, procs = tmp_path / "out", free_port(), []
    for rank in range(4):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(rank % 2),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PERFTRACKER_HOST": "ha" if rank < 2 else "hb"}
        log = (tmp_path / f"rank{rank}.log").open("wb")
        procs.append(subprocess.Popen([sys.executable, "-m", "perftracker", "sanity", "-o", str(out), "--time-box",
                                       "6"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT),
                                      start_new_session=True))
    try:
        # WHEN node ha's processes are killed one second after every rank joined (mid-check, not mid-join)
        deadline = time.monotonic() + 240
        while not all(b"joined" in (tmp_path / f"rank{r}.log").read_bytes() for r in range(4)):
            assert time.monotonic() < deadline and procs[0].poll() is None, (tmp_path / "rank0.log").read_text()
            time.sleep(0.2)
        time.sleep(1.0)
        killed_at = time.monotonic()
        for proc in procs[:2]:
            os.killpg(proc.pid, signal.SIGKILL)
        codes = [proc.wait(timeout=120) for proc in procs[2:]]
        ended = time.monotonic() - killed_at
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    # THEN rank 2 said it writes in rank 0's place, OUT names ha unreachable and keeps hb, and the survivors
    # ended within 1.25x the box of the kill (+ the writing on a loaded machine)
    assert codes == [0, 0], [(tmp_path / f"rank{r}.log").read_text()[-2000:] for r in (2, 3)]
    assert "rank 2 (hb) writes the result" in (tmp_path / "rank2.log").read_text()
    assert "writes the result" not in (tmp_path / "rank3.log").read_text()  # one writer
    summary = json.loads((out / "findings.json").read_text())["summary"]
    assert summary["exclude"] == ["ha"] and summary["keep"] == ["hb"]
    assert (out / "hostfile").read_text() == "hb slots=2\n"
    assert ended < 1.25 * 6 + 10, ended  # 10 s for writing the report on a loaded machine
