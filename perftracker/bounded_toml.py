"""Read a user's small TOML file (`--thresholds`, `--devices`) within bounds, before the TOML library sees it.

`read_toml(path, cap)` returns the parsed table of a regular file of at most `cap` bytes, or raises `TomlRefused`
with the reason, in time linear in the file (nesting and dotted keys bounded: docs/internals/core.md).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from perftracker.bounded import read_capped

MAX_DEPTH = 32
MAX_KEY_PARTS = 64
MAX_KEY_CHARS = 1024


class TomlRefused(ValueError):
    """The file is not read: `reason` says why (too large, nested too deeply, keys too long, not TOML)."""


def _scan(text: str) -> str:
    """Why the text is refused before parsing ("" when it is not): nesting depth, dotted parts per line, key length."""
    depth = parts = key_chars = 0
    i, n = 0, len(text)
    in_key = True  # before the first `=` of a line (or inside a header): where dots separate key parts
    while i < n:
        c = text[i]
        if c in "\"'":
            triple = text.startswith(c * 3, i)
            end = text.find(c * 3, i + 3) if triple else _string_end(text, i, c)
            stop = n if end < 0 else end + (3 if triple else 1)
            if in_key and stop - i > MAX_KEY_CHARS + 2:
                return f"a key of {stop - i - 2:,} characters (at most {MAX_KEY_CHARS:,})"
            i = stop
            continue
        if c == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if c == "\n":
            in_key, parts, key_chars = True, 0, 0
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return f"arrays, inline tables or headers nested more than {MAX_DEPTH} levels deep"
            if c == "{":
                in_key = True
        elif c in "]}":
            depth = max(depth - 1, 0)
        elif c == "=":
            in_key = False
        elif c == "," and depth:
            in_key = True  # the next key of an inline table
        elif c == "." and in_key:
            parts += 1
            if parts > MAX_KEY_PARTS:
                return f"a key of more than {MAX_KEY_PARTS} dotted parts on one line"
        elif in_key and not c.isspace():
            key_chars += 1
            if key_chars > MAX_KEY_CHARS:
                return f"a key of more than {MAX_KEY_CHARS:,} characters"
        i += 1
    return ""


def _string_end(text: str, start: int, quote: str) -> int:
    """Index of the quote that ends the one-line string opened at `start` (-1: none before the line ends)."""
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\n":
            return i - 1
        if c == "\\" and quote == '"':
            i += 2
            continue
        if c == quote:
            return i
        i += 1
    return -1


def read_toml(path: Path, cap: int = 1 << 20) -> dict[str, Any]:
    """The file's table (see the module docstring). TomlRefused, OSError, or InputError (not a regular file)."""
    capped = read_capped(path, cap)
    if capped.left_out:
        raise TomlRefused(f"{capped.size:,} bytes, over the {cap:,}-byte cap of such a file: refused whole, "
                          "nothing of it used")
    try:
        text = capped.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TomlRefused(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    why = _scan(text)
    if why:
        raise TomlRefused(f"not read: {why}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlRefused(f"not valid TOML ({exc})") from None
    except RecursionError:
        raise TomlRefused("not read: nested too deeply") from None
