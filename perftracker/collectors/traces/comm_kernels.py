"""Which GPU kernels are communication, and of which library: the shipped list, the user's, and `--comm-kernel`.

Promise: `load_comm_kernels(files, extra)` returns a `CommKernels` matcher built from
`perftracker/data/comm_kernels.toml`, the user's files in that format and the `--comm-kernel` regexes (family
"custom"); `family_of(name)` is the first matching family ('' for none); `fingerprint()` changes whenever the
patterns do. A bad file or regex raises `InputError` / `UsageError` naming it, never a traceback.
`collective_of(name, hint)` names the collective a kernel or CPU op performs ('all_reduce', ...; '' for none),
`message_elems` sizes its message as nccl-tests does, `DTYPE_BYTES` the bytes of a trace's dtype names.
"""

from __future__ import annotations

import functools
import hashlib
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from perftracker.errors import InputError, UsageError

CUSTOM_FAMILY = "custom"


@dataclass(frozen=True)
class CommFamily:
    """One communication library: its kernel name patterns and what it is."""

    name: str
    library: str
    patterns: tuple[str, ...]
    expert_parallel: bool = False
    sources: tuple[str, ...] = ()


class CommKernels:
    """The families in match order, each pattern compiled once."""

    def __init__(self, families: tuple[CommFamily, ...]) -> None:
        self.families = families
        self._compiled = [(f.name, re.compile(p)) for f in families for p in f.patterns]

    def family_of(self, name: str) -> str:
        """The first family with a pattern found in `name`, '' when the kernel is not communication."""
        for family, regex in self._compiled:
            if regex.search(name):
                return family
        return ""

    def describe(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """What each named family is: {"library", "expert_parallel"} (for `RunInfo.comm_libraries`)."""
        wanted = set(names)
        return {f.name: {"library": f.library, "expert_parallel": f.expert_parallel}
                for f in self.families if f.name in wanted}

    def expert_parallel(self) -> frozenset[str]:
        """Names of the expert-parallel (MoE dispatch / combine) families."""
        return frozenset(f.name for f in self.families if f.expert_parallel)

    def fingerprint(self) -> str:
        """A short hash of every family's name and patterns, in order."""
        text = repr([(f.name, f.patterns) for f in self.families])
        return hashlib.sha1(text.encode()).hexdigest()[:12]


def builtin_families() -> tuple[CommFamily, ...]:
    """The families shipped in perftracker/data/comm_kernels.toml."""
    ref = resources.files("perftracker") / "data" / "comm_kernels.toml"
    return _families(tomllib.loads(ref.read_text(encoding="utf-8")), "perftracker/data/comm_kernels.toml")


def load_comm_kernels(files: Iterable[Path] = (), extra: Iterable[str] = ()) -> CommKernels:
    """The shipped families, then those of each user file, then `extra` regexes as family "custom"."""
    families = {f.name: f for f in builtin_families()}
    for path in files:
        for family in _read_user_file(Path(path)):
            known = families.get(family.name)
            if known is None:
                families[family.name] = family
            else:
                families[family.name] = CommFamily(
                    known.name, known.library, (*known.patterns, *family.patterns),
                    known.expert_parallel or family.expert_parallel, (*known.sources, *family.sources))
    custom = tuple(extra)
    for pattern in custom:
        _check_regex(pattern, None)
    ordered = list(families.values())
    if custom:
        ordered.append(CommFamily(CUSTOM_FAMILY, "kernels named by --comm-kernel", custom))
    return CommKernels(tuple(ordered))


@functools.lru_cache(maxsize=8)
def cached_comm_kernels(files: tuple[Path, ...], patterns: tuple[str, ...]) -> CommKernels:
    """`load_comm_kernels`, once per process and arguments (not once per trace file parsed)."""
    return load_comm_kernels(files, patterns)


def _read_user_file(path: Path) -> tuple[CommFamily, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the communication kernel file ({exc})", str(path),
                         "check the path given to --comm-kernels or PERFTRACKER_COMM_KERNELS") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"the communication kernel file is not valid TOML ({exc})", str(path),
                         "write it like perftracker/data/comm_kernels.toml: [[family]] tables with a name "
                         "and patterns") from None
    return _families(document, str(path))


def _families(document: dict[str, Any], where: str) -> tuple[CommFamily, ...]:
    tables = document.get("family")
    if not isinstance(tables, list) or not tables:
        raise InputError("no [[family]] tables in the communication kernel file", where,
                         "write [[family]] tables with a name and a list of patterns, as in "
                         "perftracker/data/comm_kernels.toml")
    found = []
    for i, table in enumerate(tables, start=1):
        name = table.get("name") if isinstance(table, dict) else None
        patterns = table.get("patterns") if isinstance(table, dict) else None
        if not isinstance(name, str) or not name or not isinstance(patterns, list) \
                or not all(isinstance(p, str) and p for p in patterns):
            raise InputError(f"family {i} needs a name (text) and patterns (a list of regular expressions)", where,
                             'e.g. [[family]] name = "mylib" patterns = [\'^mylib_\']')
        for pattern in patterns:
            _check_regex(pattern, where)
        sources = table.get("sources", [])
        found.append(CommFamily(name=name, library=str(table.get("library", name)), patterns=tuple(patterns),
                                expert_parallel=bool(table.get("expert_parallel", False)),
                                sources=tuple(str(s) for s in sources) if isinstance(sources, list) else ()))
    return tuple(found)


def _check_regex(pattern: str, where: str | None) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        if where is None:
            raise UsageError(f"--comm-kernel {pattern!r} is not a valid regular expression ({exc})", "analyze",
                             "quote the pattern and escape special characters, e.g. --comm-kernel 'my_allreduce'"
                             ) from None
        raise InputError(f"the pattern {pattern!r} is not a valid regular expression ({exc})", where,
                         "fix the pattern (Python re syntax)") from None


# Canonical collective names, matched against lower-cased names with separators removed.
_COLLECTIVES = (
    ("reducescatter", "reduce_scatter"), ("allgather", "all_gather"), ("allreduce", "all_reduce"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"), ("barrier", "barrier"),
    ("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"), ("send", "send"), ("recv", "recv"),
)
DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "long": 8, "int64": 8, "int": 4, "int32": 4, "byte": 1, "char": 1, "bool": 1, "short": 2,
               "float8_e4m3fn": 1, "float8_e5m2": 1}


def message_elems(collective: str, in_elems: int | None, out_elems: int | None, group_size: int) -> int | None:
    """The element count of a collective's message as nccl-tests sizes it for bus bandwidth: the output
    buffer of an all-gather (n x the per-rank input, when the trace gives only the input), the input of
    a reduce-scatter and of everything else (an all-reduce's input and output are the same size)."""
    if collective == "all_gather":
        if out_elems is not None:
            return out_elems
        return None if in_elems is None or group_size <= 0 else in_elems * group_size
    return in_elems if in_elems is not None else out_elems


def collective_of(name: str, hint: str | None = None) -> str:
    """The canonical collective ('all_reduce', ...) a kernel or CPU op performs, or ''."""
    text = (hint or name).lower().replace("_", "").replace(" ", "")
    text = re.sub(r"^(c10d::|gloo:|nccl:|nccldevkernel|ncclkernel|nccl|rccl)", "", text)
    for needle, canonical in _COLLECTIVES:
        if needle in text:
            return canonical
    return ""
