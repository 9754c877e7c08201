"""NCCL's device/interface list syntax (NCCL_IB_HCA, NCCL_SOCKET_IFNAME), parsed the way NCCL does.

Promise: `parse_list` mirrors NCCL's parser: a leading `^` excludes, then `=` asks for exact names,
tokens are comma separated `<name>[:<port>]`, whitespace is NOT trimmed; `syntax_problems` lists
what a user most likely got wrong; `match_list` applies a list to candidate names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    raw: str
    name: str
    port: str  # "" when no :port


@dataclass(frozen=True)
class DeviceList:
    raw: str
    exclude: bool
    exact: bool
    tokens: tuple[Token, ...]


def parse_list(value: str) -> DeviceList:
    listed = value.removeprefix("^")
    text = listed.removeprefix("=")
    tokens = tuple(Token(raw, *raw.partition(":")[::2]) for raw in text.split(","))
    return DeviceList(value, listed != value, text != listed, tokens)


def syntax_problems(spec: DeviceList) -> list[str]:
    """Mistakes NCCL will not report: misplaced ^ or =, spaces, empty tokens, bad ports."""
    problems: list[str] = []
    if spec.raw.startswith("=^"):
        problems.append("'=^' is read as an exact name starting with '^'; the order must be '^='")
    for tok in spec.tokens:
        if tok.raw != tok.raw.strip():
            problems.append(f"token {tok.raw!r} has spaces, which NCCL does not trim: it never matches")
        elif not tok.raw:
            problems.append("empty token (doubled or trailing comma)")
        elif tok.name.startswith(("^", "=")) and not spec.raw.startswith("=^"):
            problems.append(f"'{tok.name[0]}' inside the list ({tok.raw!r}) applies only at the very start")
        if tok.port and not tok.port.isdigit():
            problems.append(f"port {tok.port!r} in {tok.raw!r} is not a number (NCCL reads it with atoi)")
        elif tok.port and int(tok.port) == 0:
            problems.append(f"port 0 in {tok.raw!r}: RDMA ports are numbered from 1")
    return problems


def token_matches(tok: Token, exact: bool, name: str, port: int | None = None) -> bool:
    ok = name == tok.name if exact else name.startswith(tok.name) and bool(tok.name)
    return ok and not (tok.port.isdigit() and port is not None and int(tok.port) != port)


def match_list(spec: DeviceList, names: list[str], port: int | None = None) -> list[str]:
    """The names (e.g. devices or interfaces) the list selects."""
    hit = [n for n in names if any(token_matches(t, spec.exact, n, port) for t in spec.tokens)]
    if spec.exclude:
        return [n for n in names if n not in hit]
    return hit


def overmatches(spec: DeviceList, names: list[str]) -> dict[str, list[str]]:
    """For prefix tokens: token name -> other names it also matches (`mlx5_1` -> mlx5_10, mlx5_11)."""
    if spec.exact:
        return {}
    extra = {t.name: [n for n in names if n.startswith(t.name) and n != t.name] for t in spec.tokens
             if t.name and t.name in names}
    return {name: more for name, more in extra.items() if more}


def selects_within(value: DeviceList, allowed: DeviceList, names: list[str] | None = None,
                   ports_matter: bool = True) -> bool:
    """True when everything `value` selects, `allowed` selects too, as NCCL matches the lists.

    With the candidate `names` known (the node's devices or interfaces) and `value` selecting some of
    them, the selections are compared. Otherwise token by token: a prefix token of `allowed` covers the
    names that start with it (`eth` covers `eth0` and `=eth0`), an exact token only itself, and an
    exclusion list covers every token it does not exclude. An exclusion `value` is within `allowed`
    only when written the same. `ports_matter=False` for NCCL_SOCKET_IFNAME, where NCCL ignores ports.
    """
    if value.raw == allowed.raw:
        return True
    if names:
        chosen = match_list(value, names)
        if chosen:
            return set(chosen) <= set(match_list(allowed, names))
    if value.exclude:
        return False
    return all(tok.name and _token_within(tok, value.exact, allowed, ports_matter) for tok in value.tokens)


def _token_within(tok: Token, exact: bool, allowed: DeviceList, ports_matter: bool) -> bool:
    def covers(a: Token) -> bool:
        if ports_matter and a.port and a.port != tok.port:
            return False
        if allowed.exact:
            return exact and tok.name == a.name
        return tok.name.startswith(a.name) and bool(a.name)

    def overlaps(a: Token) -> bool:  # an excluded token that takes away some of what `tok` selects
        if allowed.exact:
            return a.name == tok.name if exact else a.name.startswith(tok.name)
        return tok.name.startswith(a.name) or (not exact and a.name.startswith(tok.name))

    if allowed.exclude:
        return not any(overlaps(a) for a in allowed.tokens if a.name)
    return any(covers(a) for a in allowed.tokens)
