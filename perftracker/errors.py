"""Errors written for people: what went wrong, where, and what to do next.

Every error that can reach a user derives from `PerftrackerError`; the CLI prints its `message`
on one line and exits non-zero, never a traceback. `sentence_start` capitalizes a sentence's first
word only when it is a plain word (never a path or a command).
"""

from __future__ import annotations

import errno
import re


class PerftrackerError(Exception):
    """A problem the user can act on.

    `what` says what went wrong, `where` names the file / rank / process, `hint` says what to do.
    """

    def __init__(self, what: str, where: str = "", hint: str = "") -> None:
        self.what = what
        self.where = where
        self.hint = hint
        super().__init__(self.message)

    @property
    def message(self) -> str:
        parts = [f"{self.where}: {self.what}" if self.where else self.what]
        if self.hint:
            parts.append(sentence_start(self.hint))
        return ". ".join(p.rstrip(".") for p in parts) + "."


_PLAIN_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*,?")  # "post-mortem" is a word; "a/b", "x.json" are not
_NAMES = frozenset({"perftracker", "torchrun", "py-spy", "nvidia-smi", "ethtool"})  # commands keep their case


def sentence_start(text: str) -> str:
    """`text` with a capital first letter when it starts with a plain word ("give -o ..." -> "Give -o ...");
    a path, a file name, a command or an identifier stays as written ("shared/traces/x.json: ...", never
    "Shared/traces/...")."""
    first = text.split(" ", 1)[0]
    if not _PLAIN_WORD.fullmatch(first) or first.rstrip(",") in _NAMES:
        return text
    return text[:1].upper() + text[1:]


class InputError(PerftrackerError):
    """The input (a path, a trace, a log) cannot be used."""


class UsageError(PerftrackerError):
    """The command line asks for something that cannot be done."""


class OutputError(PerftrackerError):
    """perftracker cannot write where it was asked to (a full disk, no permission, `-o` naming a file)."""


_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
_NOT_ALLOWED = {errno.EACCES, errno.EPERM, errno.EROFS}
_NOT_A_FOLDER = {errno.ENOTDIR, errno.EEXIST, errno.EISDIR}


def output_error(path: object, exc: OSError, option: str = "-o") -> OutputError:
    """The user's view of `exc`, raised writing `path`: what, where, and what to do (`option` names the
    command-line option that chose the place, "" when none did)."""
    reason = exc.strerror or str(exc)
    elsewhere = f", or write elsewhere with {option}" if option else ""
    if exc.errno in _NO_SPACE:
        hint = "free space there" + elsewhere
    elif exc.errno in _NOT_ALLOWED:
        hint = f"give {option} a folder you can write to" if option else "make it writable"
    elif exc.errno in _NOT_A_FOLDER:
        hint = (f"{option} names a folder (made when missing); it must not be a file or lie under one" if option
                else "it must be a folder, not a file")
    else:
        hint = "check that folder" + elsewhere
    return OutputError(f"cannot write ({reason})", str(path), hint)
