"""The rules of docs/architecture.md, checked over the package's source.

Collectors collect, analyzers judge and compute every view, reports only render: who may import whom,
how big a module may grow, and that no HTML is written by hand in Python.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "perftracker"
MAX_MODULE_LINES = 450
MAX_TOP_ANALYZER_MODULES = 10

# room -> rooms it must never import (a room is the first package level under perftracker/)
FORBIDDEN = {
    "analyzers": {"collectors", "live", "reports", "cli", "pipeline", "hooks"},
    "collectors": {"analyzers", "reports", "cli", "pipeline", "live"},
    "live": {"analyzers", "reports", "cli", "pipeline"},
    "reports": {"collectors", "live", "cli", "pipeline"},
    "store": {"analyzers", "collectors", "live", "reports", "cli", "pipeline"},
}
# the formats floor (one parser per format) imports nothing of the package but these; every room may import it
FORMATS_MAY_IMPORT = {"formats", "values", "bounded", "errors"}
REPORTS_MAY_IMPORT_FROM_ANALYZERS = {"perftracker.analyzers.findings"}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "bootstrap" not in p.parts)


def _room(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every perftracker module a file imports, at any depth (function-level imports too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("perftracker")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perftracker"):
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def _target_room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_rooms_import_only_what_the_architecture_allows() -> None:
    # GIVEN every module of the package
    # WHEN its imports are read
    broken = []
    for path in _modules():
        room = _room(path)
        for line, module in _imports(path):
            target = _target_room(module)
            if room == "formats" and target not in FORMATS_MAY_IMPORT:
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} (formats/ is the floor)")
            if target in FORBIDDEN.get(room, set()):
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
            if room == "reports" and target == "analyzers" and not any(
                    module == m or module.startswith(m + ".") for m in REPORTS_MAY_IMPORT_FROM_ANALYZERS):
                broken.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} (reports may import "
                              "only the Finding model from analyzers)")
    # THEN none crosses a wall
    assert broken == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_the_size_limit(path: Path) -> None:
    # GIVEN a package module; THEN it stays small enough to hold one job
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_MODULE_LINES


def test_analyzers_top_level_holds_few_modules() -> None:
    # GIVEN analyzers/; THEN the domains live in subpackages, the top holds only the shared pieces
    top = sorted(p.name for p in (PACKAGE / "analyzers").glob("*.py"))
    assert len(top) <= MAX_TOP_ANALYZER_MODULES, top


_HTML_TAGS = ("a abbr b body br button code col details div em extra footer form h1 h2 h3 h4 h5 h6 head header "
              "hr html i iframe img input li link main meta nav ol option p pre script section select small span "
              "strong style sub summary sup table tbody td th thead title tr u ul").split()
_TAG = re.compile(r"</?(" + "|".join(_HTML_TAGS) + r")(\s[^<>]*)?/?>", re.IGNORECASE)


@pytest.mark.parametrize("path", sorted((PACKAGE / "reports").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_reports_write_no_html_in_python(path: Path) -> None:
    # GIVEN a reports module; THEN its HTML lives in templates (autoescaped), not in Python strings
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if _TAG.search(line)]
    assert hits == []


def test_registry_is_an_explicit_list() -> None:
    # GIVEN the registry; THEN it names each analyzer itself (no registration by import side effects)
    from perftracker.analyzers.registry import BUILTIN

    assert len({a.name for a in BUILTIN}) == len(BUILTIN) >= 17
    assert not any("@register" in p.read_text(encoding="utf-8") for p in (PACKAGE / "analyzers").rglob("*.py"))


DOC = PACKAGE.parent / "docs" / "architecture.md"


def test_architecture_doc_names_only_what_exists_and_every_room() -> None:
    # GIVEN docs/architecture.md
    text = DOC.read_text(encoding="utf-8")
    # WHEN the module and room paths it names are looked up
    named = set(re.findall(r"`((?:perftracker/)?[a-z_/]+(?:\.py|/))`", text))
    missing = [n for n in named if not any((base / n).exists() for base in
                                           (PACKAGE.parent, PACKAGE, PACKAGE / "analyzers", PACKAGE / "collectors",
                                            PACKAGE / "reports", PACKAGE / "cli", PACKAGE / "live", PACKAGE / "store",
                                            PACKAGE / "formats", PACKAGE / "evidence"))]
    rooms = [f"{p.name}/" for parent in ("analyzers", "collectors", "live") for p in (PACKAGE / parent).iterdir()
             if p.is_dir() and (p / "__init__.py").exists()] + ["formats/"]
    # THEN every path it names exists, and every room of analyzers/, collectors/ and live/ is described
    assert missing == []
    assert [r for r in rooms if f"`{r}`" not in text] == []


# what the commands must not reach past the API (perftracker/api.py): the analysis, its stages and outputs, loading
CLI_REACHES_ANALYSIS_ONLY_THROUGH_THE_API = (
    "perftracker.pipeline", "perftracker.outputs", "perftracker.results", "perftracker.analyzers.analysis",
    "perftracker.analyzers.registry", "perftracker.analyzers.views", "perftracker.analyzers.rootcause",
    "perftracker.analyzers.compare", "perftracker.collectors.loading",
)


def test_commands_reach_the_analysis_only_through_the_api() -> None:
    # GIVEN every module of cli/
    # WHEN its imports are read
    reached = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
               for path in sorted((PACKAGE / "cli").glob("*.py")) for line, module in _imports(path)
               if any(module == m or module.startswith(m + ".") for m in CLI_REACHES_ANALYSIS_ONLY_THROUGH_THE_API)]
    # THEN none imports the analysis, its stages, its outputs or the loader: every command stands on perftracker.api
    assert reached == []


# the predicates that tell one input's kind from another's, and the modules that define them
KIND_PREDICATES = {"is_stack_file": "collectors/stacks/snapshots.py", "is_profile_file": "collectors/stacks/samples.py",
                   "is_baseline_profile": "collectors/stacks/samples.py",
                   "is_inspector_file": "collectors/nccl/inspector.py",
                   "is_postmortem_file": "collectors/postmortem/joblogs.py",
                   "is_execution_trace": "collectors/traces/execution_trace.py", "looks_like_trace": "", "STEP_NAME": ""}
INPUT_KINDS = "collectors/input_kinds.py"


def test_inputs_are_classified_in_one_module() -> None:
    # GIVEN every module of the package
    # WHEN the predicates that decide a file's kind are looked for
    used = [f"{path.relative_to(PACKAGE)} uses {name}" for path in _modules()
            for name, home in KIND_PREDICATES.items()
            if str(path.relative_to(PACKAGE)) not in (INPUT_KINDS, home)
            and re.search(rf"\b{name}\b", path.read_text(encoding="utf-8"))]
    # THEN only collectors/input_kinds.py (and each predicate's own module) uses them: a file's kind is decided there
    assert used == []
    # AND the loader walks that list: it imports no domain's loader itself
    loaders = [module for _, module in _imports(PACKAGE / "collectors" / "loading.py")
               if module.startswith(("perftracker.collectors.nccl", "perftracker.collectors.counters",
                                     "perftracker.collectors.stacks", "perftracker.collectors.postmortem",
                                     "perftracker.collectors.steps", "perftracker.collectors.traces.execution_trace"))]
    assert loaders == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(path: Path, known: set[str]) -> set[str]:
    """The perftracker modules a file imports when it is imported: statements at module level (inside `try` or
    `if` too), not those in functions or under `if TYPE_CHECKING:`; `from a.b import c` is module `a.b.c` when
    that is a module, else `a.b`."""
    found: set[str] = set()
    todo: list[ast.stmt] = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo += node.orelse
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("perftracker")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perftracker"):
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                      for a in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for part in ("body", "orelse", "finalbody"):
                todo += getattr(node, part, [])
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e in graph), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_import_cycles_are_found() -> None:
    # GIVEN a graph with a circle of three modules and a tail; THEN the circle is found, and only it
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    # GIVEN every module of the package and the perftracker modules it imports at module level
    known = {_module_name(p) for p in _modules()}
    graph = {_module_name(p): _module_level_imports(p, known) - {_module_name(p)} for p in _modules()}
    # THEN no module imports itself back through others: the graph has no circle
    assert import_cycles(graph) == []


def test_no_module_imports_the_package_front_or_its_writer_back() -> None:
    # GIVEN every module of the package, with its imports at any depth
    up = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}" for path in _modules()
          if path != PACKAGE / "__init__.py" for line, module in _imports(path)
          if module.rsplit(".", 1)[0] == "perftracker" and module.rsplit(".", 1)[1] not in
          {_module_name(p).rsplit(".", 1)[-1] for p in PACKAGE.glob("*") if p.suffix == ".py" or p.is_dir()}]
    # THEN none reaches up into the lazy front `perftracker/__init__.py` (the version is `perftracker/_version.py`)
    assert up == []
    # AND the writer of the output folders knows a run by its shape: outputs.py does not import results.py
    assert [m for _, m in _imports(PACKAGE / "outputs.py") if m.startswith("perftracker.results")] == []


def test_every_analyzer_kind_names_a_registered_analyzer() -> None:
    # GIVEN the names the finding passes use for the analyzers (findings.Kind) and the registry's list
    from perftracker.analyzers.findings import Kind
    from perftracker.analyzers.registry import BUILTIN

    # THEN each names a registered analyzer (or the passes' own "replay"): a renamed analyzer cannot leave a
    # fold or a link matching a name no finding has
    assert sorted(k.value for k in Kind if k.value not in {a.name for a in BUILTIN} | {"replay"}) == []


TESTS = Path(__file__).resolve().parent
# what stays at the top of tests/: the suites that cross every room
TOP_LEVEL_TESTS = {"test_architecture.py", "test_fuzz.py", "test_fuzz_places.py", "test_samples.py",
                   "test_sample_job.py", "test_synth.py", "test_wheel_demo.py"}


def test_tests_mirror_the_package_rooms() -> None:
    # GIVEN the test folders that stand for a room of the package (tests/analyzers/<room>, tests/collectors/<room>,
    # tests/live/<room>)
    mirrored = [folder for parent in ("analyzers", "collectors", "live") if (TESTS / parent).is_dir()
                for folder in (TESTS / parent).iterdir() if folder.is_dir() and folder.name != "__pycache__"]
    # THEN each names a room that exists, and only the cross-cutting suites sit at the top of tests/
    assert [str(f.relative_to(TESTS)) for f in mirrored
            if not (PACKAGE / f.relative_to(TESTS)).is_dir()] == []
    assert sorted(p.name for p in TESTS.glob("test_*.py") if p.name not in TOP_LEVEL_TESTS) == []


# Issue 37 asks for 42,000 lines at most (47,729 when it was filed): new capability is paid for by removals.
# The budget is where the package stands, lowered as code goes. Raised once, from 42,750, for the typed evidence
# of the first step (perftracker/evidence/: a TypedDict per finding kind, +663 lines; removals paid 238),
# then lowered to 42,300 by the sixth round of removals (-879), and to the 42,000 by the seventh (-331).
MAX_PACKAGE_LINES = 42_000


def test_the_package_stays_within_its_line_budget() -> None:
    # GIVEN every module of the package (blank lines and docstrings count: `wc -l`)
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in PACKAGE.rglob("*.py"))
    # THEN the package is no larger than its budget
    assert lines <= MAX_PACKAGE_LINES, f"perftracker/ has {lines:,} lines, over its budget of {MAX_PACKAGE_LINES:,}"
