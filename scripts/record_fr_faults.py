"""Record flight-recorder dumps of real 8-rank gloo jobs with one injected fault each (test fixtures).

Usage: python scripts/record_fr_faults.py OUT_DIR [--faults raise gil kill] [--fault-rank 5]

For each fault it runs scripts/fr_fault_job.py under torchrun (8 ranks, gloo, tensor / data / pipeline
groups, the launcher's monitor interval long enough that it does not tear the job down before the dumps
are taken), waits until every rank finished the step before the fault and the job stood still for a few
seconds, then asks every rank that is still alive for its flight recorder as JSON through torch's
control-plane worker server (`POST /handler/fr_trace_json` on `ws.<rank>.sock`; C++ answers it even when
the main thread is blocked or holds the GIL) and writes `rank_<r>.json`, unless the rank already dumped a
pickle `rank_<r>` itself when it failed, and takes a py-spy dump of every live rank (the snapshot format
`attach` writes: stacks/<time>-hang/rank-<r>.json). Then it stops the job and keeps the dumps and the job's output
(`job.out`) in OUT_DIR/<fault>/. A rank that is dead or whose server does not answer leaves no dump.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NPROC = 8


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.path)
        self.sock = sock


def pull(sock: Path, timeout: float = 10.0) -> bytes | None:
    """The rank's FR dump as JSON, or None when its server does not answer."""
    try:
        conn = UnixHTTPConnection(str(sock), timeout)
        conn.request("POST", "/handler/fr_trace_json")
        response = conn.getresponse()
        body = response.read()
        return body if response.status == 200 else None
    except OSError:
        return None


def spy(work: Path, rank: int, snapshot: Path) -> None:
    """py-spy's dump of the rank's threads, as `attach` stores a snapshot (nothing when py-spy fails)."""
    pid_file = work / f"pid.{rank}"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    done = subprocess.run([py_spy, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return
    snapshot.mkdir(parents=True, exist_ok=True)
    body = {"rank": rank, "pid": pid, "host": "vm", "ts_ns": time.time_ns(), "mode": "dump", "world_size": NPROC,
            "threads": json.loads(done.stdout)}
    (snapshot / f"rank-{rank}.json").write_text(json.dumps(body))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_stall(log: Path, fault_step: int, deadline: float) -> None:
    """Until every rank printed the step before the fault and the output stopped growing for 4 s."""
    want = {f"rank {r} step {fault_step - 1} done" for r in range(NPROC)}
    size, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if len(text) != size:
            size, still_since = len(text), time.monotonic()
        if all(w in text for w in want) and time.monotonic() - still_since > 4:
            return
        time.sleep(0.5)


def record(fault: str, out: Path, fault_rank: int, fault_step: int) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"fr-{fault}-"))
    log = work / "job.out"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(NPROC), "--max_restarts", "0",
               "--monitor_interval", "120", "--tee", "3", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{free_port()}",
               str(REPO / "scripts" / "fr_fault_job.py"), "--fault", fault, "--fault-rank", str(fault_rank),
               "--fault-step", str(fault_step), "--timeout", "90"]
    env = {**os.environ, "FR_DIR": str(work), "FR_LINGER_S": "30", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as handle:
        job = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            wait_for_stall(log, fault_step, time.monotonic() + 240)
            for rank in range(NPROC):
                if (work / f"rank_{rank}").exists():
                    continue
                body = pull(work / f"ws.{rank}.sock")
                if body is not None:
                    (work / f"rank_{rank}.json").write_bytes(body)
            snapshot = work / "stacks" / f"{time.strftime('%Y%m%dT%H%M%S')}-hang"
            for rank in range(NPROC):
                spy(work, rank, snapshot)
        finally:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
    target = out / fault
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for f in sorted(work.iterdir()):
        if f.name.startswith("rank_") or f.name == "job.out":
            shutil.copy(f, target / f.name)
    if (work / "stacks").exists():
        shutil.copytree(work / "stacks", target / "stacks")
    shutil.rmtree(work, ignore_errors=True)
    print(f"{fault}: {sorted(p.name for p in target.iterdir())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--faults", nargs="+", default=["raise", "gil", "kill"])
    parser.add_argument("--fault-rank", type=int, default=5)
    parser.add_argument("--fault-step", type=int, default=3)
    args = parser.parse_args()
    for fault in args.faults:
        record(fault, args.out, args.fault_rank, args.fault_step)


if __name__ == "__main__":
    main()
