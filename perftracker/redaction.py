"""What perftracker never keeps: secret environment variables, credentials in values, secret command-line options.

`keep_variable`, `redact_value`, `safe_env` and `redact_command`: everything perftracker stores (env snapshots,
manifests, reports) passes here. The rules: docs/internals/core.md.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"
# Longer values, arguments and quoted lines are cut to this length, saying so: no setting, argument or log
# line a diagnosis needs is longer, and every pass below then costs a bounded time whatever an input holds.
MAX_TEXT_CHARS = 1 << 16

ALLOWED_PREFIXES = (
    "NCCL_", "TORCH_", "CUDA_", "UCX_", "GLOO_", "OMP_", "MASTER_", "TORCHELASTIC_", "PYTORCH_", "NVIDIA_",
    "OMPI_COMM_WORLD_", "PMI_", "PMIX_RANK", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NNODES", "SLURM_NTASKS",
    "HCOLL_", "SHARP_", "MLX5_", "IBV_", "RDMAV_", "MELLANOX_", "KINETO_", "PERFTRACKER_",
)
ALLOWED_NAMES = frozenset({
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "NODE_RANK",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "LD_LIBRARY_PATH", "LD_PRELOAD", "HOSTNAME",
})
# Documented variables whose name holds a secret-looking word but whose value is configuration.
DOCUMENTED_EXCEPTIONS = frozenset({"NCCL_IB_PKEY", "UCX_IB_PKEY"})
SECRET_WORDS = ("TOKEN", "PASS", "PWD", "SECRET", "KEY", "CRED", "CERT", "BEARER", "WEBHOOK", "AUTH", "COOKIE",
                "PRIVATE", "SESSION")
# Identifiers perftracker needs as they are (job grouping, host names); still checked for URL credentials.
_IDENTIFIERS = frozenset({"TORCHELASTIC_RUN_ID", "HOSTNAME"})

_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# A scheme starts only where no scheme character precedes it: each run of them is tried once (linear time;
# without the look-behind a 256 KiB run of letters took 105 s).
_URL_USERINFO = re.compile(r"(?<![A-Za-z0-9+.\-])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^/\s@?#]+)@")
# name=value inside a value or an argument: query parameters, comma/semicolon lists, a bare key=value
_PARAM = re.compile(r"(?P<lead>(?:^|[?&;,\s]))(?P<name>[A-Za-z0-9_.\-]{1,64})=(?P<value>[^&;,\s]*)")
_SECRET_PARAM_EXTRA = re.compile(r"^(?:sig|signature|x-amz-signature|x-amz-credential|sas|api[-_]?key)$",
                                 re.IGNORECASE)
# '/' stays inside: base64 keys hold it; no token is shorter than 14 characters (a known prefix and 12 more),
# so shorter pieces are not looked at (a megabyte of short words costs one regex scan, not a call per word)
_PIECES = re.compile(r"[^\s,:;=@?&'\"]{14,}")
_PATH_PARTS = re.compile(r"[^/]+")
_UUID = re.compile(r"^(?:[A-Z]+-)*[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")  # GPU-..., MIG-...
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_KNOWN_TOKEN = re.compile(r"^(?:gh[pousr]_|github_pat_|xox[abposr]-|sk-|hf_|glpat-|AKIA|ASIA|eyJ)[A-Za-z0-9_\-.]{12,}")
_OPTION = re.compile(r"^(?P<dashes>--?)(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]*)(?:=(?P<value>.*))?$", re.DOTALL)


def is_secret_name(name: str) -> bool:
    """Does `name` (a variable, an option, a parameter) look like it holds a secret?"""
    return name.upper() not in DOCUMENTED_EXCEPTIONS and bool(_SECRET_NAME.search(name)
                                                                 or _SECRET_PARAM_EXTRA.match(name))


def keep_variable(name: str) -> bool:
    """True for environment variables perftracker may keep: allow-listed and not secret-looking."""
    if name not in DOCUMENTED_EXCEPTIONS and _SECRET_NAME.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_token(piece: str) -> bool:
    """A key or token: a known token prefix, or a long string mixing character classes like random data does."""
    if _KNOWN_TOKEN.match(piece):
        return True
    if len(piece) < 20 or _UUID.match(piece):
        return False
    if _HEX.match(piece):
        return len(piece) >= 32 and any(c.isdigit() for c in piece) and any(c.isalpha() for c in piece)
    mixed = all((any(c.islower() for c in piece), any(c.isupper() for c in piece), any(c.isdigit() for c in piece)))
    # base64-like; words, paths and host names mix fewer classes, and a CamelCase name (a kernel's, a symbol's:
    # FP8RowwiseQuantizedToFloat) is mostly words, runs of 4+ lower-case letters that random data rarely has
    return mixed and _entropy(piece) >= 4.0 and _in_words(piece) < 0.5


_WORD = re.compile(r"[a-z]{4,}")


def _in_words(piece: str) -> float:
    """The share of `piece` in runs of four or more lower-case letters."""
    return sum(len(m) for m in _WORD.findall(piece)) / len(piece)


def capped(text: str) -> str:
    """`text` cut to MAX_TEXT_CHARS, saying how much was cut."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:MAX_TEXT_CHARS]} ...<{len(text) - MAX_TEXT_CHARS:,} more characters cut>"


_PARAM_HINTS = (*SECRET_WORDS, "SIG", "SAS", "API")


def _hide_params(text: str) -> str:
    upper = text.upper()
    if "=" not in text or not any(word in upper for word in _PARAM_HINTS):  # no secret-looking name: nothing to hide
        return text
    return _PARAM.sub(lambda m: f"{m.group('lead')}{m.group('name')}={REDACTED}"
                      if is_secret_name(m.group("name")) and m.group("value") else m.group(0), text)


def redact_value(value: str, check_tokens: bool = True) -> str:
    """`value` (cut to MAX_TEXT_CHARS, saying so) with URL user info, secret-looking name=value parameters and
    (with `check_tokens`) token-like strings replaced by `<redacted>`; any other text unchanged."""
    out = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", capped(value))
    out = _hide_params(out)
    if check_tokens:
        out = _PIECES.sub(lambda m: _redact_piece(m.group(0)), out)
    return out


def _redact_piece(piece: str, is_token: Callable[[str], bool] = looks_like_token) -> str:
    if piece.startswith(("/", "~", ".")):  # a path (or a URL's): each of its parts on its own
        return _PATH_PARTS.sub(lambda m: REDACTED if is_token(m.group(0)) else m.group(0), piece)
    return REDACTED if is_token(piece) else piece


def _text_token(piece: str) -> bool:
    """A token inside free text (a log line, an exception): a known token prefix, or a long string mixing
    lower case, upper case and digits like random data does with no `_` (identifiers, kernel and symbol
    names hold one) and no hex-only run (hashes and ids are not secrets)."""
    return bool(_KNOWN_TOKEN.match(piece)) or ("_" not in piece and not _HEX.match(piece) and looks_like_token(piece))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A PEM private key: from its BEGIN line (cut or whole) to its END line, or to the end of the text when cut
_PEM = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?:[ A-Z]{0,20}-----)?.*?(?:-----END[ A-Z0-9]{0,60}-----|\Z)",
                  re.DOTALL)
# An HTTP credential after its scheme word (`Authorization: Bearer <token>`, `Basic <base64>`)
_AUTH_SCHEME = re.compile(r"(?i)\b(?P<scheme>bearer|basic|token)(?P<gap>[ \t]+)(?P<cred>[A-Za-z0-9._~+/\-]{8,}=*)")
# `password: hunter2`, `"api_key": "x"`: a secret-looking name, a colon, a value
_COLON_SECRET = re.compile(r"(?i)(?P<name>\b[A-Za-z0-9_.\-]{0,40}(?:passw(?:or)?d|passwd|secret|api[_-]?key|"
                           r"access[_-]?key|private[_-]?key|token)[\"']?)(?P<gap>[ \t]*:(?!:)[ \t]*[\"']?)"
                           r"(?P<value>[^\s\"',;]{1,})")


def plain_line(text: str) -> str:
    """`text` with every control character (newlines, escapes, NUL ...) made a space: one line that can
    neither forge another line ("Verdict: ...") nor act on a terminal."""
    return _CONTROL.sub(" ", text) if _CONTROL.search(text) else text


def redact_text(text: str) -> str:
    """Free text quoted from an input (a log or NCCL line, an exception, a stack frame, a file name) with the
    credentials it may carry hidden: URL user info, secret-looking name=value parameters, known token
    prefixes (`ghp_`, `AKIA`, `sk-`, ...) and long random-looking strings (an AWS secret key); the rest,
    kernel and symbol names, paths, hashes and numbers, unchanged. Cut to MAX_TEXT_CHARS (saying so)."""
    out = capped(text)
    if "PRIVATE KEY" in out:
        out = _PEM.sub(f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----", out)
    out = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", out)
    out = _hide_params(out)
    out = _AUTH_SCHEME.sub(lambda m: f"{m.group('scheme')}{m.group('gap')}{REDACTED}"
                           if m.group("scheme").lower() == "bearer" or _text_token(m.group("cred"))
                           or m.group("cred").endswith("=") else m.group(0), out)
    if ":" in out:
        out = _COLON_SECRET.sub(lambda m: f"{m.group('name')}{m.group('gap')}{REDACTED}"
                                if m.group("value") != REDACTED else m.group(0), out)
    return _PIECES.sub(lambda m: _redact_piece(m.group(0), _text_token), out)


def safe_text(text: str) -> str:
    """What every output shows of a text from an input: `redact_text`, on one line (`plain_line`). Short texts
    are remembered (a name repeated in every row or every rank's evidence is redacted once)."""
    return _safe_short(text) if len(text) <= 512 else plain_line(redact_text(text))


@functools.lru_cache(maxsize=1 << 16)
def _safe_short(text: str) -> str:
    return plain_line(redact_text(text))


def safe_frame(frame: Any) -> Any:
    """A DataFrame whose text cells (object, string and categorical columns) passed `safe_text`: each distinct
    string once (a categorical's categories, not its rows), so a column of a million rows of a few names costs
    a few calls. The frame itself when nothing changed; a copy otherwise."""
    import numpy as np
    import pandas as pd

    out = None
    for name in frame.columns:
        col = frame[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            cats = list(col.cat.categories)
            new = [safe_text(c) if isinstance(c, str) else c for c in cats]
            if new == cats:
                continue
            fixed = (col.cat.rename_categories(new) if len(set(new)) == len(new)
                     else col.astype(object).map(dict(zip(cats, new))))
        elif col.dtype == object or isinstance(col.dtype, pd.StringDtype):
            codes, uniques = pd.factorize(col)
            values = list(uniques)
            new = [safe_text(v) if isinstance(v, str) else v for v in values]
            if new == values:
                continue
            table = np.empty(len(new) + 1, dtype=object)
            table[:-1] = new
            table[-1] = None
            fixed = pd.Series(table[codes], index=col.index, name=name)  # -1 (missing) picks the None
            if isinstance(col.dtype, pd.StringDtype):
                fixed = fixed.astype(col.dtype)
        else:
            continue
        if out is None:
            out = frame.copy()
        out[name] = fixed
    return frame if out is None else out


def safe_tables(tables: Mapping[str, Any]) -> dict[str, Any]:
    """Every table through `safe_frame`: what an output folder's tables/, its report and a diff page show."""
    return {name: safe_frame(frame) for name, frame in tables.items()}


def carries_credential(name: str, value: str) -> bool:
    """Does the value of variable `name` (its first MAX_TEXT_CHARS) hold a credential `redact_value` would hide?"""
    return redact_value(value, check_tokens=name not in _IDENTIFIERS) != capped(value)


def safe_env(env: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed, secret-free part of `env`: a variable whose value carries a credential is dropped whole;
    a value longer than MAX_TEXT_CHARS is cut there, saying so in the value itself."""
    return {k: capped(v) for k, v in env.items() if keep_variable(k) and not carries_credential(k, v)}


def redact_command(argv: Sequence[str]) -> list[str]:
    """`argv` with the values of secret-looking options (`--password x`, `--api-key=x`, `-p`/`--token` ...),
    of secret-looking `key=value` arguments and every credential `redact_value` finds replaced by `<redacted>`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("-"):
                out.append(REDACTED)
                continue
        option = _OPTION.match(arg)
        if option is not None and is_secret_name(option.group("name")):
            if option.group("value") is None:
                hide_next = True
                out.append(arg)
            else:
                out.append(f"{option.group('dashes')}{option.group('name')}={REDACTED}")
            continue
        out.append(redact_value(arg))
    return out
