"""Regenerate sample_traces/attach-4rank-slow-rank2: `perftracker attach` on a real, unprepared job.

A 4-rank gloo DDP job (CPU, width 256, batch 1024) with rank 2 doing 3x the forward compute is started
without the hook, profiler, KINETO_USE_DAEMON or NCCL_DEBUG; once it trains, `perftracker attach
<launcher pid> --duration 16` collects what an unprepared job gives: environments, stacks, sampled
stacks of every rank (profiles/), the host manifest. The demo's verdict on it names rank 2 from the
sampled stacks alone. Needs torch (CPU build is enough). Run from the repository root:

    python scripts/make_sample_attach.py
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_traces" / "attach-4rank-slow-rank2"
MAX_BYTES = 1_000_000
sys.path.insert(0, str(ROOT / "scripts"))

from sample_job_runner import free_port, job_command, worker_pids  # noqa: E402


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    port = free_port()
    scratch = OUT.parent / ".scratch-attach-job"
    cmd = job_command(scratch, 4, port, ["--steps", "100000", "--profile-steps", "0", "--width", "256", "--batch",
                                         "1024", "--slow-rank", "2", "--slow-factor", "3"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(worker_pids(job.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(8)  # past start-up: the ranks train
        code = subprocess.call([sys.executable, "-m", "perftracker", "attach", str(job.pid), "-o", str(OUT),
                                "--duration", "16", "--quiet", "--no-analyze"], cwd=ROOT, timeout=120)
    finally:
        for pid in [job.pid, *worker_pids(job.pid).values()]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"attach exit code {code}; {size / 1e3:.0f} kB in {OUT}")
    if code != 0 or size > MAX_BYTES:
        print("attach failed or the sample is too large", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
