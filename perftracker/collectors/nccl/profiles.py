"""Platform profiles: recommended NCCL settings shipped as data files, or given by the user.

Promise: `load_profile(name_or_path)` returns a validated profile dict (`name`, `description`, `source`,
`fabric`, `values`) from `perftracker/profiles/<name>.json` or a JSON file's path; a bad profile raises
`InputError` with one clear line. A profile's values are what its user intends: never warned about as such.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from perftracker.bounded import loads_json, read_text
from perftracker.errors import InputError

DEFAULT_PROFILE = "generic"


def shipped_profiles() -> list[str]:
    """Names of the profiles in the package."""
    folder = resources.files("perftracker") / "profiles"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


MAX_PROFILE_BYTES = 16 * 1024 * 1024


def load_profile(name_or_path: str | Path | None = None) -> dict[str, Any]:
    """A shipped profile by name, or a user profile from a JSON file."""
    name = str(name_or_path or DEFAULT_PROFILE)
    path = Path(name)
    if name.endswith(".json") or path.is_file():
        try:  # bounded: a FIFO, a device or a huge file is refused; bytes that are not UTF-8 are replaced
            text, capped = read_text(path, MAX_PROFILE_BYTES)
        except OSError as exc:
            raise InputError(f"cannot read profile: {exc.strerror or exc}", where=name) from None
        if capped.left_out:
            raise InputError(f"the profile is over {MAX_PROFILE_BYTES:,} bytes: not a profile", where=name)
    else:
        ref = resources.files("perftracker") / "profiles" / f"{name}.json"
        if not ref.is_file():
            raise InputError(f"unknown profile {name!r}", hint=f"use one of {', '.join(shipped_profiles())} "
                             "or a path to a JSON profile")
        text = ref.read_text(encoding="utf-8")
    try:
        data = loads_json(text)
    except ValueError as exc:
        raise InputError(f"profile is not valid JSON: {exc}", where=name) from None
    return validate_profile(data, name)


def validate_profile(data: Any, where: str = "profile") -> dict[str, Any]:
    """Check the shape of a profile and normalise its values to strings."""
    if not isinstance(data, dict) or not isinstance(data.get("values", {}), dict):
        raise InputError("a profile must be a JSON object with a 'values' object", where=where)
    values: dict[str, dict[str, str]] = {}
    for var, spec in data.get("values", {}).items():
        if isinstance(spec, dict) and "value" in spec:
            values[str(var)] = {"value": str(spec["value"]), "consequence": str(spec.get("consequence", ""))}
        elif isinstance(spec, (str, int)):
            values[str(var)] = {"value": str(spec), "consequence": ""}
        else:
            raise InputError(f"profile value for {var} must be a string or {{'value': ...}}", where=where)
    return {
        "name": str(data.get("name") or Path(where).stem),
        "description": str(data.get("description", "")),
        "source": str(data.get("source", "")),
        "fabric": str(data.get("fabric", "")).lower(),
        "values": values,
    }
