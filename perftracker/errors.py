"""Errors written for people: what went wrong, where, and what to do next.

Every error that can reach a user derives from `PerftrackerError`; the CLI prints its `message`
on one line and exits non-zero, never a traceback.
"""

from __future__ import annotations


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
            parts.append(self.hint[:1].upper() + self.hint[1:])
        return ". ".join(p.rstrip(".") for p in parts) + "."


class InputError(PerftrackerError):
    """The input (a path, a trace, a log) cannot be used."""


class UsageError(PerftrackerError):
    """The command line asks for something that cannot be done."""
