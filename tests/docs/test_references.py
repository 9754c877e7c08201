"""Every module path and repository file named in the docs, the README and the package's docstrings exists.

A reference is a path with a known extension (`analyzers/traces/idle.py`, `sample_traces/README.md`), a
bare module file name (`voice.py`) or a dotted module path (`perftracker.live.watch.incidents`). A path is found
when a file of the repository ends with it (docstrings name modules relative to their package, e.g.
`rootcause/causality.py` inside analyzers/); a dotted path when it imports, or names an attribute of a
module that does. Placeholders (`rank-<r>.json`, `*.py`) and paths under an output folder the user names
are not references to this repository and are skipped by the patterns below.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = "py|md|toml|sh|j2|yml|yaml|json"
# a path of at least two segments whose first segment is a folder of this repository or of the package
PATH = re.compile(rf"(?<![\w/.<>*-])((?:[A-Za-z_.][\w.-]*/)+[A-Za-z_][\w.-]*\.(?:{EXTENSIONS}))(?![\w/<>*])")
BARE_MODULE = re.compile(r"(?<![\w/.<>*-])([a-z_][a-z0-9_]*\.py)\b")
# Examples by design, not files of this repository: the user's training script and wrapper, a made-up
# generator in a manifest example, a trace file in an output example, the architecture page's worked example
# of a new analyzer, the plotly.py library; files of other projects named as sources (flash-attn's
# flash_attn_interface.py, NCCL's nccl_payload_breakdown.py) and a job's own file in a stack example (job.py).
EXAMPLES = {"train.py", "perftracker.sh", "scripts/make_x.py", "traces/rank-1.json", "all_to_all.py",
            "templates/section_all_to_all.html.j2", "plotly.py", "flash_attn_interface.py",
            "nccl_payload_breakdown.py", "job.py"}
DOTTED = re.compile(r"(?<![\w.])(perftracker(?:\.[a-z_][a-z0-9_]*)+)")


def repository_files() -> list[str]:
    skip = {".git", ".venv", "site", "__pycache__", "node_modules", ".mypy_cache", ".ruff_cache"}
    files = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.is_file() and not skip.intersection(parts):
            files.append(path.relative_to(ROOT).as_posix())
    return files


def roots(files: list[str]) -> set[str]:
    """First segments a reference may start with: the repository's folders and the package's subpackages."""
    firsts = {f.split("/")[0] for f in files if "/" in f}
    firsts |= {f.split("/")[1] for f in files if f.startswith("perftracker/") and f.count("/") >= 2}
    firsts |= {f.split("/")[2] for f in files if f.startswith("perftracker/") and f.count("/") >= 3}
    firsts |= {f.split("/")[1] for f in files if f.startswith("tests/") and f.count("/") >= 2}
    return firsts


def texts() -> list[tuple[str, str]]:
    """(where, text) of every docs page, the README, and every docstring and comment of the package."""
    found = [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]]
    for path in sorted((ROOT / "perftracker").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        comments = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                    if tok.type == tokenize.COMMENT]
        found.append((f"{path.relative_to(ROOT).as_posix()} (comments)", "\n".join(comments)))
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    found.append((f"{path.relative_to(ROOT).as_posix()}:{getattr(node, 'lineno', 1)}", doc))
    return found


def dotted_exists(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def stale_references() -> list[str]:
    files = repository_files()
    names = {f.rsplit("/", 1)[-1] for f in files}
    firsts = roots(files)
    stale = []
    for where, text in texts():
        for ref in PATH.findall(text):
            if ref in EXAMPLES or ref.split("/")[0] not in firsts:
                continue  # an example path (traces/rank-3.json, out/report.html), not the repository's
            if not any(f == ref or f.endswith("/" + ref) for f in files):
                stale.append(f"{where}: {ref}")
        for ref in BARE_MODULE.findall(text):
            if ref not in names and ref not in EXAMPLES:
                stale.append(f"{where}: {ref}")
        for ref in DOTTED.findall(text):
            if ref not in EXAMPLES and not dotted_exists(ref):
                stale.append(f"{where}: {ref}")
    return sorted(set(stale))


def test_every_named_module_and_file_exists() -> None:
    # GIVEN the docs, the README and the docstrings WHEN every path and module they name is looked up
    # THEN each exists
    assert stale_references() == []


def test_a_moved_module_is_caught(tmp_path: Path) -> None:
    # GIVEN a text naming a module that does not exist WHEN checked THEN it is reported
    text = "see `analyzers/nowhere/gone.py` and perftracker.collectors.gone"
    assert PATH.findall(text) == ["analyzers/nowhere/gone.py"]
    assert not dotted_exists("perftracker.collectors.gone")
    assert dotted_exists("perftracker.rundir.discover")
