"""The outside slowdown of the accuracy corpus's ``stop`` runs: ``scripts/disturb.DutyCycle`` SIGSTOPs a worker for
a share of every period, holds that share on a loaded machine, and always leaves the worker running.

The straggler analyzer naming such a rank (stopped 90% of every 20 ms, from outside the job) is checked on
three recorded real 4-rank torchrun jobs of ``tests/fixtures/accuracy`` (``stop90-rank*``, recorded by
``scripts/record_accuracy_runs.py --scenarios stop``) in ``test_accuracy_corpus.py``; a fresh such job ran
here before and took about 90 s of the suite's one real-job lane.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

from disturb import DutyCycle  # noqa: E402 - needs scripts/ on sys.path


def test_duty_cycle_stops_the_process_and_always_leaves_it_running() -> None:
    # GIVEN a busy child process and a duty cycle stopping it 80% of every 50 ms, in a thread
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc, stop = psutil.Process(child.pid), threading.Event()
        cycle = DutyCycle(0, stopped=0.8, period_s=0.05)
        thread = threading.Thread(target=cycle, args=({0: child.pid}, stop))
        thread.start()
        # WHEN it runs for a while
        seen = set()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            seen.add(proc.status())
            time.sleep(0.005)
        # THEN the process was seen stopped
        assert psutil.STATUS_STOPPED in seen
        # AND once stopped the duty cycle ends promptly, leaving the process running, not stopped
        stop.set()
        thread.join(2.0)
        assert not thread.is_alive()
        # AND it says the share of the time it kept the process stopped: the 80% asked for, late wake-ups paid back
        assert cycle.achieved_stopped is not None and abs(cycle.achieved_stopped - 0.8) <= 0.1, cycle.achieved_stopped
        time.sleep(0.05)
        assert proc.status() != psutil.STATUS_STOPPED
    finally:
        child.kill()
        child.wait()
