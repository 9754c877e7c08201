"""Ctrl-C that works while Ray holds the interpreter: a small watchdog process hears the signal when Python cannot.

Promise: inside `interrupt_watchdog(what)`, a SIGINT (unless this process ignored it on entry) or SIGTERM that this
process has not answered GRACE_S later (counting the time it sleeps in a wait or runs, not its waits for a CPU or a
disk on a busy machine nor a stop; 10x GRACE_S at most) ends it (SIGKILL) with a message on stderr; a normal end
lets the child go. Where a wakeup fd cannot be set, nothing changes. Why and how: docs/internals/collectors.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_S = 3.0  # how long Python gets to handle the interrupt itself (the usual path) before the watchdog acts

# The child: reads signal numbers from stdin; on SIGINT/SIGTERM gives the parent GRACE_S to end by itself (counting
# only the time it sleeps or runs: /proc/<pid>/stat and schedstat), then says so and kills it. EOF (the parent
# closed the pipe or ended) ends the child quietly.
_CHILD = r"""
import os, select, signal, sys, time
parent, grace, what, wanted = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], {int(s) for s in sys.argv[4:]}
fd = sys.stdin.fileno()
heard = []
if int(signal.SIGINT) in wanted:  # a terminal's Ctrl-C reaches us too
    signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
def alive():
    try:
        with open(f"/proc/{parent}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(parent, 0)
            return True
        except OSError:
            return False
def pipe_closed(timeout):
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return False
    data = os.read(fd, 64)
    if wanted.intersection(data):
        heard.append(1)
    return not data
while not heard:
    if pipe_closed(0.2):
        sys.exit(0)
def running():  # (state, seconds on a CPU) of the parent's main thread; (None, 0) where /proc does not say
    try:
        with open(f"/proc/{parent}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{parent}/schedstat") as f:
            return state, int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None, 0.0
# The grace counts the time the parent could have ended and did not: asleep (state S: blocked in a wait, as in a
# stuck connect) or on a CPU. Waiting for a CPU or a disk on a busy machine (R off the CPU, D) or stopped does
# not count: schedstat's wait time grows only once the parent runs again, so it cannot tell this alone. A whole
# interval between two looks counts only when the parent slept at both; else only its time on a CPU does (it may
# have left a stop or a wait for a CPU at any point of it), so the grace is never cut short.
began = last = time.monotonic()
counted, (state_last, cpu_last) = 0.0, running()
while counted < grace and time.monotonic() - began < 10 * grace:
    if pipe_closed(0.1) or not alive():
        sys.exit(0)
    now = time.monotonic()
    state, cpu = running()
    asleep = state in (None, "S") and state_last in (None, "S")
    counted += now - last if asleep else cpu - cpu_last
    last, cpu_last, state_last = now, cpu, state
sys.stderr.write(
    f"perftracker: interrupted while {what}, which did not give control back within {grace:g} s "
    "(a stuck or unreachable Ray raylet or cluster?); stopped. Nothing was written to the output folder.\n")
sys.stderr.flush()
try:
    os.kill(parent, signal.SIGKILL)  # not SIGTERM: Ray's own handler of it dumps a C++ stack and may wait again
except OSError:
    pass
"""


@contextmanager
def interrupt_watchdog(what: str, grace_s: float = GRACE_S) -> Iterator[None]:
    """While inside, an interrupt Python cannot handle within `grace_s` still ends this process, with a message."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    child = None
    try:
        previous: int | None = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        previous = None
    # A process started with Ctrl-C ignored (a job a script started with `&`) keeps ignoring it; the child too,
    # inheriting that: only SIGTERM is watched for.
    wanted = [signal.SIGTERM] if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else [signal.SIGINT, signal.SIGTERM]
    if previous == -1:
        try:
            child = subprocess.Popen([sys.executable, "-c", _CHILD, str(os.getpid()), str(grace_s), what,
                                      *(str(int(s)) for s in wanted)], stdin=read_fd, close_fds=True)
        except OSError:
            signal.set_wakeup_fd(-1)
    elif previous is not None:  # somebody else's wakeup fd: leave it to them
        signal.set_wakeup_fd(previous)
    os.close(read_fd)
    if child is None:
        os.close(write_fd)
        yield
        return
    try:
        yield
    finally:
        signal.set_wakeup_fd(-1)
        os.close(write_fd)  # EOF: the child leaves
        try:
            child.wait(timeout=grace_s + 2)
        except subprocess.TimeoutExpired:
            child.kill()
