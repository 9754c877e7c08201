"""Build hook: the wheel carries the sample runs, so that `pip install perftracker-dl && perftracker demo` works.

Everything else is in pyproject.toml. `sample_traces/` (one copy in the repository, with its README naming
each run's provenance) is copied into the built package as `perftracker/samples/`, where `perftracker demo`
looks first (cli/demo.py). A source checkout or an editable install has no perftracker/samples/ and uses
sample_traces/ itself. tests/test_wheel_demo.py builds the wheel and runs the demo from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "sample_traces"
SKIP = shutil.ignore_patterns(".scratch-*", "__pycache__", "*.pyc")


class BuildWithSamples(build_py):
    """build_py, then sample_traces/ copied into the build as perftracker/samples/."""

    def run(self) -> None:
        super().run()
        if SAMPLES.is_dir():
            target = Path(self.build_lib) / "perftracker" / "samples"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(SAMPLES, target, ignore=SKIP)


setup(cmdclass={"build_py": BuildWithSamples})
