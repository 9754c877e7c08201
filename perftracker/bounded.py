"""Read untrusted files within bounds: regular files only, a size cap, bounded lines, JSON nesting and gzip output.

Whatever a file is or holds, the readers here return in time and memory proportional to the cap, never more,
and nothing read is evaluated. The rules (caps, gzip, lines, JSON): docs/internals/core.md.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from perftracker.errors import InputError

DEFAULT_MAX_FILE_BYTES = 2 * 1024**3
MAX_LINE_CHARS = 1 << 16  # longer lines are cut: no log or counter line of a real tool comes near it
_BLOCK = 1 << 22
_INFLATE_CHUNK = 1 << 20


def file_cap() -> int:
    """The per-file byte cap: `PERFTRACKER_MAX_FILE_BYTES` when set to a positive number, else 2 GiB."""
    raw = os.environ.get("PERFTRACKER_MAX_FILE_BYTES", "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and 0 < int(raw) < 1 << 62 else DEFAULT_MAX_FILE_BYTES


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return what
    return "not a regular file"


def not_regular(path: Path) -> str:
    """Why `path` is not a readable regular file ("" when it is one): what it is, or where its symlink leads."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (links that lead back to each other)"
        return "a broken symlink" if os.path.islink(path) else f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(st.st_mode):
        return ""
    what = _kind(st.st_mode)
    return f"a symlink to {what}" if os.path.islink(path) else what


_BLOCKING = re.compile(r"^/proc/kmsg$|^/proc/sysrq-trigger$|^/sys/kernel/(?:debug/)?tracing/(?:.*/)?trace_pipe")


def blocking_file(path: Path | str) -> bool:
    """Is `path` (resolved) a regular file whose read blocks or consumes what it reads (/proc/kmsg, a trace pipe)?"""
    return bool(_BLOCKING.match(os.path.realpath(path)))


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for binary reading; InputError when it is not a regular file (never blocks on a FIFO) or
    is a kernel file whose read blocks (`blocking_file`)."""
    if blocking_file(path):
        raise InputError("is a kernel file whose read blocks and consumes what it reads", str(path),
                         "perftracker never reads it: copy what you need into a file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot open the file ({exc.strerror or exc})", str(path),
                         "check the path and its permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = _kind(mode)
            raise InputError(f"is {'a symlink to ' if os.path.islink(path) else ''}{what}, not a regular file",
                             str(path), "perftracker reads only regular files: copy the data into a file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class Capped:
    """Bytes read from a file under the cap: `left_out` bytes beyond it were not read."""

    data: bytearray
    size: int  # the file's size when opened
    left_out: int
    squeezed: int = 0  # whitespace bytes dropped from long runs (when asked to)

    def note(self, cap: int) -> str:
        """What the cap left out, for a load note ("" when nothing)."""
        if not self.left_out:
            return ""
        return (f"the file is {self.size:,} bytes, over perftracker's per-file cap of {cap:,}: only the first "
                f"{cap:,} were read, {self.left_out:,} left out (set PERFTRACKER_MAX_FILE_BYTES to raise the cap)")


def read_capped(path: Path, cap: int | None = None, squeeze: bool = False) -> Capped:
    """The first `cap` bytes of a regular file (InputError for anything else; OSError when reading fails).

    With `squeeze`, long whitespace runs are squeezed as they are read (`Capped.squeezed` counts them;
    the cap then counts the bytes read from the file)."""
    limit = file_cap() if cap is None else cap
    read = squeezed = 0
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        data = bytearray()
        while read < limit:  # in blocks into one growing buffer: never the file twice in memory
            block: bytes | bytearray = handle.read(min(4 * _BLOCK, limit - read))
            if not block:
                break
            read += len(block)
            if squeeze:  # a run cut by a block boundary is squeezed on each side (both sides long)
                block, dropped = squeeze_blank_runs(block)
                squeezed += dropped
            data += block
        more = read == limit and bool(handle.read(1))
    return Capped(data, max(size, read), max(1, size - limit) if more else 0, squeezed)


def read_head(path: Path, n: int = 65536) -> bytes:
    """The first `n` bytes of a regular file; b"" for anything that is not one or cannot be read (sniffing)."""
    try:
        with open_regular(path) as handle:
            return handle.read(n)
    except (InputError, OSError):
        return b""


def read_text(path: Path, cap: int | None = None) -> tuple[str, Capped]:
    """A regular file's text (UTF-8, bad bytes replaced) under the cap, and what was read."""
    capped = read_capped(path, cap)
    return capped.data.decode("utf-8", errors="replace"), capped


@dataclass
class LineStats:
    """What `iter_lines` did to a file's lines: how many it cut, how many bytes the cap left out."""

    cut_lines: int = 0
    left_out: int = 0
    size: int = 0

    def notes(self, cap: int) -> list[str]:
        said = []
        if self.cut_lines:
            said.append(f"{self.cut_lines} line(s) longer than {MAX_LINE_CHARS:,} characters were cut to that length")
        if self.left_out:
            said.append(Capped(bytearray(), self.size, self.left_out).note(cap))
        return said


def split_lines(data: bytes, final: bool) -> tuple[list[str], bytes]:
    """Complete lines of `data` (decoded, line ends removed) and the bytes left over.

    Line ends are those of Python's universal newlines (\\n, \\r\\n, \\r); the text is UTF-8
    with undecodable bytes replaced. With `final`, a last line without a line end is included.
    """
    hold = b""
    if not final and data.endswith(b"\r"):  # maybe the first half of \r\n
        data, hold = data[:-1], b"\r"
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    cut = len(data) if final else data.rfind(b"\n") + 1
    lines = data[:cut].decode("utf-8", "replace").split("\n")
    if not final or lines[-1] == "":
        lines.pop()  # the empty text after the last line end
    return lines, data[cut:] + hold


class LineBlocks:
    """A regular file's lines in blocks (lists of str), under the cap, each line at most MAX_LINE_CHARS.

    Iterating yields (number of the block's first line, lines); `ends_open` tells whether the last line
    had no line end; `stats` what was cut. Opening raises InputError / OSError like `open_regular`.
    """

    def __init__(self, path: Path, cap: int | None = None) -> None:
        self.path, self.cap = path, file_cap() if cap is None else cap
        self.stats, self.ends_open = LineStats(), False

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        with open_regular(self.path) as handle:
            self.stats.size = os.fstat(handle.fileno()).st_size
            yield from self._blocks(handle)

    def _blocks(self, handle: BinaryIO) -> Iterator[tuple[int, list[str]]]:
        line, rest, budget, skipping = 1, b"", self.cap, False
        while budget > 0:
            block = handle.read(min(_BLOCK, budget))
            if not block:
                break
            budget -= len(block)
            data = rest + block if rest else block
            lines, rest = split_lines(data, final=False)
            if skipping and lines:  # the first line ends the one whose start was already given
                lines.pop(0)
                line += 1
                skipping = False
            if len(rest) > MAX_LINE_CHARS:  # a line with no end in sight: give its start, drop the rest
                if not skipping:
                    lines.append(rest[:MAX_LINE_CHARS].decode("utf-8", "replace"))
                    self.stats.cut_lines += 1
                    skipping = True
                rest = rest[-1:] if rest.endswith(b"\r") else b""
            if lines:
                yield line, self._cut(lines)
                line += len(lines)
        if budget <= 0 and handle.read(1):
            self.stats.left_out = max(1, self.stats.size - self.cap)
        if rest and not skipping:
            lines, _ = split_lines(rest, final=True)
            self.ends_open = not rest.endswith((b"\n", b"\r"))
            yield line, self._cut(lines)

    def _cut(self, lines: list[str]) -> list[str]:
        if any(len(s) > MAX_LINE_CHARS for s in lines):
            self.stats.cut_lines += sum(len(s) > MAX_LINE_CHARS for s in lines)
            return [s[:MAX_LINE_CHARS] for s in lines]
        return lines


def iter_lines(blocks: LineBlocks) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of `blocks`."""
    for first, lines in blocks:
        yield from enumerate(lines, first)


BLANK_RUN = 1 << 16  # whitespace runs this long are squeezed (JSON readers): no real text has one
TO_SPACE = bytes.maketrans(b"\t\r\n", b"   ")  # whitespace as spaces (a run is then one `find`)
_NOT_SPACE = re.compile(rb"[^ ]")


def squeeze_blank_runs(chunk: bytes | bytearray, min_run: int = BLANK_RUN) -> tuple[bytes | bytearray, int]:
    """`chunk` with each run of at least `min_run` whitespace bytes replaced by one space, and how many bytes
    that dropped (linear: one translate, then `find`s)."""
    needle = b" " * min_run
    probe = chunk.translate(TO_SPACE)
    at = probe.find(needle)
    if at < 0:
        return chunk, 0
    parts: list[bytes | bytearray] = []
    last = dropped = 0
    while at >= 0:
        other = _NOT_SPACE.search(probe, at + min_run)
        end = other.start() if other else len(probe)
        parts += [chunk[last:at], b" "]
        dropped += end - at - 1
        last = end
        at = probe.find(needle, end)
    parts.append(chunk[last:])
    return b"".join(parts), dropped


@dataclass
class Inflated:
    """A gzip stream inflated under a cap."""

    data: bytearray
    complete: bool  # the stream ended properly
    capped: bool  # inflating stopped at the cap
    error: str  # the zlib error that stopped it ("" for none)
    refused: bool = False  # stopped at once: the first other byte is not one of `first_bytes`
    squeezed: int = 0  # whitespace bytes dropped from long runs (when asked to)


def inflate(raw: bytes | bytearray, cap: int | None = None, skip_leading_blank: bool = False,
            first_bytes: bytes | None = None, squeeze: bool = False) -> Inflated:
    """Inflate gzip `raw` in chunks into at most `cap` bytes (memory stays near the output, never twice it).

    With `skip_leading_blank`, whitespace before the first other byte is not kept (a stream of nothing but
    whitespace then costs no memory at all). With `first_bytes`, inflating stops as soon as
    the first other byte is not one of them (a bomb of zeros costs one chunk). With `squeeze`, long
    whitespace runs are squeezed (`squeeze_blank_runs`); the cap counts every byte inflated.
    """
    limit = file_cap() if cap is None else cap
    out = bytearray()
    stream = zlib.decompressobj(wbits=31)
    pending = memoryview(raw)
    squeezed = decoded = 0
    error = ""
    try:
        while not stream.eof and decoded < limit:
            produced = stream.decompress(pending, min(_INFLATE_CHUNK, limit - decoded))
            decoded += len(produced)
            pending = memoryview(stream.unconsumed_tail)
            if not produced and not pending and not stream.eof:
                break  # the input ends before the stream does
            chunk: bytes | bytearray = produced
            if skip_leading_blank and not out:
                chunk = chunk.lstrip(b" \t\r\n")
            if first_bytes is not None and not out and chunk and chunk[:1] not in first_bytes:
                return Inflated(bytearray(chunk[:1]), False, False, "", refused=True)
            if squeeze:
                chunk, dropped = squeeze_blank_runs(chunk)
                squeezed += dropped
            out += chunk
    except zlib.error as exc:
        error = str(exc)
    capped = not stream.eof and not error and decoded >= limit
    return Inflated(out, stream.eof, capped, error, squeezed=squeezed)


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_B = re.compile(rb"\\u[dD][89a-fA-F]")


_LONE_SURROGATE_B = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                               rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def replace_lone_surrogate_escapes(data: bytearray) -> int:
    """Replace, in place, JSON escapes of lone surrogates (`\\ud800` without its pair) by `\\ufffd`
    (same length, so byte positions hold); how many. Some decoders refuse them, others pass them on."""
    if _SURROGATE_ESCAPE_B.search(data) is None:
        return 0
    spans = [m.span() for m in _LONE_SURROGATE_B.finditer(data)]
    for start, end in spans:
        data[start:end] = b"\\ufffd"
    return len(spans)


def clean_text(text: str) -> str:
    """`text` with lone surrogates (which JSON escapes and pickles can carry, and UTF-8 cannot) replaced."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def clean_strings(value: Any) -> Any:
    """A decoded JSON value with every string (keys too) passed through `clean_text`; walked without recursion."""
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (list, dict)):
        return value
    todo: list[list[Any] | dict[Any, Any]] = [value]
    while todo:
        node = todo.pop()
        for key, item in list(enumerate(node) if isinstance(node, list) else node.items()):
            if isinstance(item, str):
                item = clean_text(item)
            elif isinstance(item, (list, dict)):
                todo.append(item)
            if isinstance(key, str) and clean_text(key) != key:
                del node[key]  # type: ignore[arg-type]
                key = clean_text(key)
            node[key] = item
    return value


def loads_json(text: str | bytes | bytearray) -> Any:
    """json.loads, with nesting too deep for the decoder said as ValueError like any other malformed JSON,
    and lone surrogates (`"\\ud800"`) in strings replaced so that every string can be stored."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    found = SURROGATE_ESCAPE.search(text) if isinstance(text, str) else _SURROGATE_ESCAPE_B.search(text)
    return clean_strings(value) if found else value


def load_json_file(path: Path, cap: int | None = None) -> Any:
    """A small JSON file (manifest, sidecar, snapshot) parsed under the cap; InputError / OSError / ValueError."""
    text, capped = read_text(path, cap)
    if capped.left_out:
        raise ValueError(capped.note(file_cap() if cap is None else cap))
    return loads_json(text)

