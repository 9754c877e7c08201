"""Every option's value checked once, for the API and the commands alike, before anything is loaded.

Each function returns a value in its one accepted form or raises the `UsageError` that names the option both
ways (keyword and flag) and says what to give. Imports only `perftracker.errors`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from perftracker.errors import UsageError

# an option's keyword in the API -> its flag on the command line (where the command has one)
FLAGS = {
    "comm_kernel_patterns": "--comm-kernel", "comm_kernel_files": "--comm-kernels", "workers": "--workers",
    "engine": "--engine", "ray_address": "--ray-address", "nccl_profile": "--profile", "sysfs_root": "--sysfs-root",
    "sysfs_host": "--host", "nsys_step_range": "--nvtx-step", "follow_links": "--follow-links", "job": "--job",
    "cache": "--no-cache", "hta_compat": "--hta-compat", "device_files": "--devices", "timeline": "--timeline",
    "thresholds": "--set / --thresholds", "tolerance": "--tolerance", "max_events": "--max-events",
    "ranks": "--ranks", "steps": "--steps", "allow_different_jobs": "--allow-different-jobs",
}
MAX_SELECTED = 1_000_000  # ranks or steps one timeline may name (a range wider than this is a typo)


def named(keyword: str) -> str:
    """How an option is named in a message: its keyword, and its flag where a command has one."""
    flag = FLAGS.get(keyword)
    return f"{keyword} / {flag}" if flag else keyword


def _wrong(keyword: str, value: object, what: str, example: str) -> UsageError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return UsageError(f"{shown} is not {what}", named(keyword), f"give {example}")


def boolean(value: object, keyword: str) -> bool:
    """True or False, nothing else ("no", 0 and None are refused: "no" is truthy)."""
    if not isinstance(value, bool):
        raise _wrong(keyword, value, "True or False", f"{keyword}=True or {keyword}=False")
    return value


def whole(value: object, keyword: str, low: int = 0, high: int | None = None) -> int:
    """A whole number in [low, high] (a bool or a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"at least {low}" if high is None else f"from {low} to {high}"
        raise _wrong(keyword, value, f"a whole number {span}", f"e.g. {keyword}={max(low, 1)}")
    return value


def finite(value: object, keyword: str, low: float = 0.0, high: float | None = None) -> float:
    """A finite number in [low, high] (NaN, infinities and bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < low or (high is not None and value > high):
        span = f"at least {low:g}" if high is None else f"from {low:g} to {high:g}"
        raise _wrong(keyword, value, f"a finite number {span}", f"e.g. {keyword}={max(low, 0.05):g}")
    return float(value)


def text(value: object, keyword: str) -> str:
    """A string."""
    if not isinstance(value, str):
        raise _wrong(keyword, value, "a string", f'{keyword}="..."')
    return value


def optional_text(value: object, keyword: str) -> str | None:
    """A string or None."""
    return None if value is None else text(value, keyword)


def path(value: object, keyword: str) -> Path:
    """A path (a str or an os.PathLike of str)."""
    if isinstance(value, str) or (isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)):
        return Path(value)
    raise _wrong(keyword, value, "a path", f'{keyword}="some/folder"')


def optional_path(value: object, keyword: str) -> Path | None:
    """A path or None."""
    return None if value is None else path(value, keyword)


def _items(value: object, keyword: str, what: str, example: str) -> list[object]:
    """The items of a list-like value: a lone string (or path, or bytes) is refused, never split into characters."""
    if value is None:
        return []
    if isinstance(value, str | bytes | os.PathLike | Mapping) or not isinstance(value, Iterable):
        raise _wrong(keyword, value, f"a list of {what}", f"a list, e.g. {keyword}={example}")
    return list(value)


def strings(value: object, keyword: str, example: str = '["..."]') -> tuple[str, ...]:
    """A list (or tuple) of strings as a tuple; None is the empty tuple."""
    items = _items(value, keyword, "strings", example)
    for item in items:
        if not isinstance(item, str):
            raise _wrong(keyword, value, "a list of strings", f"a list, e.g. {keyword}={example}")
    return tuple(str(item) for item in items)


def paths(value: object, keyword: str) -> tuple[Path, ...]:
    """A list (or tuple) of paths as a tuple of Path; None is the empty tuple."""
    return tuple(path(item, keyword) for item in _items(value, keyword, "paths", '["a.toml"]'))


def patterns(value: object, keyword: str = "comm_kernel_patterns") -> tuple[str, ...]:
    """A list of regular expressions, each compiled once to check it."""
    checked = strings(value, keyword, '["my_allreduce"]')
    for pattern in checked:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"not a valid regular expression ({exc})", f"{named(keyword)} {pattern!r}",
                             "fix the pattern (Python `re` syntax; escape a literal parenthesis as \\( ), e.g. "
                             "--comm-kernel 'my_allreduce|custom_a2a'") from None
    return checked


def selection(value: object, keyword: str) -> list[int] | None:
    """Ranks or steps to select: None (all) or a list of whole numbers from 0 to MAX_SELECTED, sorted, once each."""
    if value is None:
        return None
    return sorted({whole(item, keyword, 0, MAX_SELECTED) for item in _items(value, keyword, "numbers", "[0, 3]")})


def optional_callable(value: object, keyword: str, example: str) -> None:
    """A function, or None."""
    if value is not None and not callable(value):
        raise _wrong(keyword, value, "callable", example)


def mapping(value: object, keyword: str) -> Mapping[str, object]:
    """A mapping of names (strings) to values."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _wrong(keyword, value, "a mapping of names to values", f'{keyword}={{"straggler.alpha": 0.005}}')
    return value
