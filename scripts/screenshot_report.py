"""Regenerate docs/img/report.png: the top of a real report, as the README and the docs show it.

GIVEN the real sample run `sample_traces/ddp-gloo-4rank-slow-rank2` (a 4-rank DDP job on gloo whose rank 2
does extra forward work; its provenance is in sample_traces/README.md), this script analyzes it with the
package in this checkout, opens the written report.html in Debian's headless Chromium and keeps a PNG of
the first screen (`--window-size`). Run it after a change to the report's look:

    python scripts/screenshot_report.py                  # writes docs/img/report.png
    python scripts/screenshot_report.py --run sample_traces/gloo-4rank-stall-rank2 --out /tmp/x.png
    python scripts/screenshot_report.py --run tests/fixtures/pipeline_gloo/imbalance/traces --only layout \
        --size 1280,610 --out docs/img/pipeline-grid.png          # the guide docs/guides/pipelines.md
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=15000"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "sample_traces" / "ddp-gloo-4rank-slow-rank2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "report.png")
    parser.add_argument("--size", default="1280,1100", help="window width,height in CSS pixels")
    parser.add_argument("--only", default="", help="a section's key (e.g. layout): the page shows that section alone")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        print("screenshot_report.py: chromium is not installed (sudo apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="perftracker-shot-") as tmp:
        # A copy analyzed from inside the temporary folder, so that the page shows short relative paths
        # (`ddp-gloo-4rank-slow-rank2`, `report/`) rather than this machine's.
        run = Path(tmp) / args.run.resolve().name
        shutil.copytree(args.run, run)
        # The command line, not the Python API: what a user runs, and stable while the API moves.
        subprocess.run([sys.executable, "-m", "perftracker", "analyze", run.name, "-o", "report", "--quiet"],
                       check=True, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        page = Path(tmp) / "report" / "report.html"
        if args.only:  # hide every other section (the copy in the temporary folder only)
            hide = f"<style>nav, #summary, #coverage, #findings, section:not(#{args.only}) {{display: none}}</style>"
            page.write_text(page.read_text(encoding="utf-8").replace("</head>", hide + "</head>", 1), encoding="utf-8")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={Path(tmp) / 'profile'}",
                        f"--window-size={args.size}", f"--screenshot={args.out.resolve()}",
                        (Path(tmp) / "report" / "report.html").as_uri()], check=True, capture_output=True, timeout=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
