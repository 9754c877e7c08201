"""Regenerate sample_traces/gloo-4rank-stall-rank2: a real job run through `perftracker run` where rank 2
stops joining collectives at step 6 and gloo's 8 s process-group timeout ends the job.

It shows the post-mortem side of the demo: the job's own output (timeout errors, tracebacks, torchrun's
failure summary), step times from the hook loaded without code changes, environments, stacks taken
when progress stopped. Needs torch (CPU build is enough). Run from the repository root:

    python scripts/make_sample_postmortem.py
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "sample_traces" / "gloo-4rank-stall-rank2"
MAX_BYTES = 1_000_000


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scratch = OUT.parent / ".scratch-job"
    cmd = [sys.executable, "-m", "perftracker", "run", "-o", str(OUT), "--no-kineto-daemon", "--",
           sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_port", str(port),
           str(ROOT / "scripts" / "sample_job.py"), "--run-dir", str(scratch), "--steps", "40", "--profile-steps",
           "0", "--width", "128", "--hang-rank", "2", "--hang-step", "6", "--pg-timeout", "8"]
    code = subprocess.call(cmd, cwd=ROOT, timeout=300)
    shutil.rmtree(scratch, ignore_errors=True)  # the job's own copies: the run directory has what matters
    shutil.rmtree(OUT / "perftracker-out", ignore_errors=True)  # the demo re-analyzes
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"job exit code {code} (non-zero expected: the timeout ends it); {size / 1e3:.0f} kB in {OUT}")
    if size > MAX_BYTES:
        print("sample too large", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
