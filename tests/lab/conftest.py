"""The namespace lab for live tests: one 3-node lab per module (built once, removed however the tests end),
skipped with the reason when this machine cannot build one (not root, no iproute2 / util-linux, no namespaces)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from netlab import Lab, node_names


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    why = Lab.available()
    if why:
        pytest.skip(why)
    with Lab(node_names(3)) as built:
        yield built
