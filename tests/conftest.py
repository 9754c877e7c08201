"""Shared test fixtures: where ../shared is, small trace builders, and small or read-only filesystems."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perftracker.analyzers.findings import Finding
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.evidence import breaches
from perftracker.store import Store

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
HTA_TRACES = SHARED / "traces" / "hta"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "benchmarks"))  # the synthetic job generator (synth.py), kept out of the package


REAL_JOB_GROUP = "real-jobs"


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package and the job scripts to bytecode once, in the controller, before any test: the tests
    start hundreds of Python processes (`perftracker` commands, torchrun ranks), and where PYTHONDONTWRITEBYTECODE
    is set (as in CI) each of them compiled every module it imported again (~0.5 s of CPU per command). For the
    same reason pytest may keep the test modules it rewrote for assertions: without it each worker rewrote all
    of them on every run (about half of collecting the suite, ~7 s of CPU per worker)."""
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):
        import compileall

        for folder in ("perftracker", "scripts"):
            compileall.compile_dir(ROOT / folder, quiet=2)


_OFF_CONTRACT: set[str] = set()
_made = Finding.__post_init__


def _made_and_checked(finding: Finding) -> None:
    _made(finding)
    if not finding.fixed_id:  # made by this code, not read back from a saved findings.json
        _OFF_CONTRACT.update(f"{finding.analyzer} {finding.title[:50]!r}: {b}"
                             for b in breaches(finding.analyzer, finding.evidence))


Finding.__post_init__ = _made_and_checked  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def evidence_follows_its_kinds_type() -> Iterator[None]:
    """THEN every finding a test makes has the evidence its kind's type declares (perftracker/evidence/)."""
    _OFF_CONTRACT.clear()
    yield
    found = sorted(_OFF_CONTRACT)
    _OFF_CONTRACT.clear()
    assert not found, "evidence off its kind's type (declare it in perftracker/evidence/):\n" + "\n".join(found[:30])


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How pytest-xdist (`--dist loadgroup`) shares the tests out: every real multi-process job test on one
    worker, one at a time (the `slow` tests other than the browser ones, marked `browser` or in a file named so,
    start torchrun jobs or the network lab, and two such jobs at once on a 2-core machine starve each other's
    timing); every other test with the rest of its file, so a module's expensive fixture (a Ray cluster, a
    recorded corpus) is built once. The real-job group comes first: it is the longest (about 12 minutes, mostly
    waiting on its jobs); then the files with the most tests, as pytest-xdist orders them by default (`.ci/run`
    passes `--no-loadscope-reorder`, so that it hands the groups out in this order)."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        test_file = item.nodeid.split("::")[0]
        browser = item.get_closest_marker("browser") is not None or "browser" in test_file
        real_job = item.get_closest_marker("slow") is not None and not browser
        group = REAL_JOB_GROUP if real_job else test_file
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)
    order = sorted(groups, key=lambda group: (group != REAL_JOB_GROUP, -len(groups[group])))
    items[:] = [item for group in order for item in groups[group]]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """Under `--dist loadgroup`, stop if the groups did not take: pytest-xdist marks a grouped test by
    appending `@group` to its id, which pytest 9 ignores (the dev extra pins pytest<9); the real-job tests
    would then run on both workers at once and starve each other."""
    ungrouped = [test_id for test_id in ids if "@" not in test_id]
    config = getattr(node, "config", None)
    if ungrouped and config is not None and config.getoption("dist", None) == "loadgroup":
        pytest.exit(f"pytest-xdist's --dist loadgroup did not group {len(ungrouped)} tests (e.g. {ungrouped[0]}) "
                    f"on pytest {pytest.__version__}: install the dev extra's pytest (pip install -e '.[dev]')",
                    returncode=4)


@pytest.fixture
def hta_traces() -> Path:
    if not HTA_TRACES.is_dir():
        pytest.skip("../shared/traces/hta is not present (fresh clone without the shared corpus)")
    return HTA_TRACES


@functools.cache
def corpus_store(path: Path) -> Store:
    """The Store of one folder of the shared corpus or of sample_traces/, loaded once per test session.

    For tests that only read it (analyses do not change a Store): the corpus' traces are the slowest
    inputs to parse, and several test modules analyze the same ones.
    """
    return load_path(path, LoadOptions(workers=1))
@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """`mount(size, *options)`: a fresh tmpfs of `size` (e.g. "256k") under tmp_path, unmounted after the test.
    Mounting needs root (CAP_SYS_ADMIN): the test is skipped where it cannot mount."""
    mounted: list[Path] = []

    def mount(size: str, *options: str) -> Path:
        target = tmp_path / f"tmpfs-{len(mounted)}"
        target.mkdir()
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs",
                                   str(target)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot mount a tmpfs here ({exc})")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


@pytest.fixture
def unwritable_dir(tmp_path: Path, tmpfs: Callable[..., Path]) -> Iterator[Path]:
    """A folder this process cannot write into: read-only permissions, or, for root (whom permissions do not
    stop), a read-only tmpfs."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
    else:
        yield tmpfs("64k", "ro")
