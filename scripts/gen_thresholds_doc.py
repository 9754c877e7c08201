"""Write docs/reference/thresholds.md from perftracker/data/thresholds.toml (tests/analyzers/test_thresholds.py fails
when the committed page differs from what this writes). Run: python scripts/gen_thresholds_doc.py"""

from __future__ import annotations

from pathlib import Path

from perftracker.cli.thresholds import write_reference

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "thresholds.md"

if __name__ == "__main__":
    write_reference(PAGE)
    print(f"wrote {PAGE}")
