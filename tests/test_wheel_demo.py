"""From a built wheel, in a fresh virtual environment away from any checkout, `perftracker demo` writes the
index and every sample run's report (the wheel carries the samples as perftracker/samples/, setup.py).

The wheel is built (`pip wheel --no-deps`) from a copy of the sources, installed without dependencies into a
new venv, and given the dependencies of the running interpreter through a .pth line (their folder only: its
site hooks, such as an editable install of this checkout, are not run), so the test needs no network. It
checks that the demo imported perftracker from the venv, not from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["perftracker", "sample_traces", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md"]


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", ".scratch-*"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, src, cwd=src)
    (built,) = out.glob("perftracker_dl-*.whl")  # the distribution's name is free on the package index
    return built


def test_the_wheel_carries_the_samples_and_the_schemas(wheel: Path) -> None:
    # GIVEN the built wheel WHEN listed THEN it holds every sample run and both schemas, within 1.5 MB of samples
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
    names = {i.filename for i in infos}
    samples = sorted(p.name for p in (ROOT / "sample_traces").iterdir() if p.is_dir() and not p.name.startswith("."))
    for run_name in samples:
        assert f"perftracker/samples/{run_name}/manifest.json" in names, run_name
    assert {"perftracker/schemas/findings.schema.json", "perftracker/schemas/diff.schema.json"} <= names
    assert sum(i.file_size for i in infos if i.filename.startswith("perftracker/samples/")) < 1.5e6
    # AND it is the distribution perftracker-dl, whose import package is perftracker (not the index's "perftracker")
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(metadata).decode()
    assert "\nName: perftracker-dl\n" in text and "\nRequires-Python: >=3.11\n" in text
    assert not any(n.startswith("perftracker/synth") for n in names)  # the synthetic generators stay out


def test_demo_runs_from_the_wheel_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    # GIVEN a fresh venv with only the wheel installed (dependencies through a .pth line), in a folder with
    # no sample_traces/
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    purelib = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path)
                   .stdout.strip())
    run(sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", purelib, wheel,
        cwd=tmp_path)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "zz_perftracker_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    where = run(python, "-c", "import perftracker; print(perftracker.__file__)", cwd=tmp_path, env=env).stdout
    assert Path(where.strip()).is_relative_to(purelib), where
    # WHEN `perftracker demo` runs there
    result = run(python, "-m", "perftracker", "demo", "-o", tmp_path / "demo", cwd=tmp_path, env=env)
    # THEN it writes the index and one report per sample run, and prints each run's verdict
    samples = sorted(p.name for p in (ROOT / "sample_traces").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert (tmp_path / "demo" / "index.html").is_file()
    for name in samples:
        assert (tmp_path / "demo" / name / "report.html").is_file(), name
        assert (tmp_path / "demo" / name / "findings.json").is_file(), name
        assert name in result.stdout
    assert str(ROOT) not in result.stdout + result.stderr
