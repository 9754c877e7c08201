"""How a finished torch.distributed job script ends: ``end_job(code)``, without the interpreter's teardown.

Promise: ``end_job(code)`` flushes stdout and stderr, then ends the process with ``code`` at once (``os._exit``);
call it once the job has closed its process group and everything it writes is flushed. Why: gloo runs each
collective on a worker thread (``pt_gloo_runloop``), which may drop its last reference to a finished collective a
moment after the main thread saw it complete. That drop needs the GIL (the work's saved thread-local state holds
Python objects), and a thread that asks a finalizing interpreter for the GIL is ended by ``pthread_exit``, whose
unwinding through a C++ destructor calls ``std::terminate``: "terminate called without an active exception",
SIGABRT, on a rank that had done every step, and torchrun reports the job failed. Caught in the namespace lab's
link-flap test under load (3 of 73 runs beside two busy loops); the core showed the abort on
``pt_gloo_runloop`` in ``AsyncWork::~AsyncWork`` -> ``take_gil`` -> ``PyThread_exit_thread`` while the main thread
was in ``Py_FinalizeEx``. ``perftracker sanity`` ends its ranks the same way (``perftracker/cli/sanity.py``).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def end_job(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with `code` (no atexit handlers, no interpreter teardown)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
