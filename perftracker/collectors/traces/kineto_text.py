"""Read a Kineto trace file's JSON text within bounds: decompressed, under the per-file cap, checked to be JSON.

Promise: `read_bytes(path)` returns the text (a bytearray, shortened in place later) with notes about anything
left out (over the cap, a gzip cut or corrupt, whitespace squeezed); it raises `InputError` for a file that is
not a regular file, is empty, is not JSON, or is a corrupt gzip with nothing before the damage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from perftracker.bounded import BLANK_RUN, file_cap, inflate, read_capped, read_head
from perftracker.errors import InputError


@dataclass
class TraceText:
    """A trace file's JSON text as read: decompressed, under the per-file cap."""

    data: bytearray
    gzip: bool
    whole: bool  # the text is the whole trace (False: a gzip stream cut short, or the cap reached)
    notes: list[str] = field(default_factory=list)
    squeezed: int = 0  # whitespace bytes dropped from long runs as read


GZIP_MAGIC = b"\x1f\x8b"
_NON_BLANK = re.compile(rb"[^ \t\r\n]")


def read_bytes(path: Path) -> TraceText:
    """The file's JSON text with notes about what was left out; InputError as the module docstring says."""
    try:
        capped = read_capped(path, squeeze=read_head(path, 2) != GZIP_MAGIC)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", str(path),
                         "check the path and its permissions") from None
    cap = file_cap()
    notes = [capped.note(cap)] if capped.left_out else []
    text = TraceText(capped.data, gzip=capped.data[:2] == GZIP_MAGIC, whole=not capped.left_out, notes=notes)
    if text.gzip:
        inflated = inflate(capped.data, cap, skip_leading_blank=True, first_bytes=b"{[", squeeze=True)
        del capped
        text.data = inflated.data
        if inflated.error and not inflated.data:
            raise InputError(f"corrupt gzip data ({inflated.error})", str(path),
                             "the file is damaged; re-export or re-copy this rank's trace")
        if inflated.error:
            notes.append(f"the gzip data is corrupt after {len(inflated.data):,} decoded bytes ({inflated.error}); "
                         "using what comes before")
        elif inflated.capped:
            notes.append(f"the decompressed trace reaches perftracker's per-file cap of {cap:,} bytes; reading "
                         "stopped there (a gzip bomb, or a trace bigger than any real one: set "
                         "PERFTRACKER_MAX_FILE_BYTES to raise the cap)")
        elif not inflated.complete:
            notes.append("the gzip stream ends early (file cut off while being written); using what it holds")
        text.whole = text.whole and inflated.complete
        text.squeezed += inflated.squeezed
    text.squeezed += capped.squeezed if not text.gzip else 0
    if text.squeezed:
        notes.append(f"{text.squeezed:,} bytes of whitespace in runs of {BLANK_RUN:,} or more were dropped as read "
                     "(padding, or a bomb; byte counts below are of the text kept)")
    first = _NON_BLANK.search(text.data)
    if first is None:
        raise InputError("the file is empty", str(path),
                         "the profiler did not finish writing it; re-run the profiled steps or drop this file")
    if bytes(text.data[first.start():first.start() + 1]) not in (b"{", b"["):
        raise InputError("this is not JSON (not a PyTorch profiler trace)", str(path),
                         "pass .json or .json.gz files written by torch.profiler")
    return text
