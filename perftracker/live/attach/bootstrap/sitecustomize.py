"""Loaded by Python at start-up in jobs launched with `perftracker run`: installs the step hook.

It never raises into the job, and it chains to any other sitecustomize further on sys.path so a
site's own start-up customisation still runs.
"""

import importlib.util
import os
import sys


def _install() -> None:
    if os.environ.get("PERFTRACKER_HOOK", "1") != "1":
        return
    try:
        from perftracker.launcher_env import rank_in

        if rank_in(os.environ) is None:
            return  # the launcher itself, or an unrelated Python process
        import perftracker.hooks

        perftracker.hooks.install()
    except Exception as exc:  # never harm the job
        sys.stderr.write(f"perftracker: step hook not installed ({type(exc).__name__}: {exc})\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_site_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                try:
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
                except Exception as exc:
                    sys.stderr.write(f"perftracker: the site's sitecustomize failed: {exc}\n")
            return


_install()
_chain()
