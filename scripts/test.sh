#!/usr/bin/env bash
# Set up a fresh environment and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  # The report tests render report.html in headless Chromium (Debian's package).
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "scripts/test.sh: please install chromium (e.g. sudo apt-get install chromium)" >&2
  fi
fi
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"          # CPU build: the real torchrun tests use it
python -m pip install -q -e ".[dev]"
python -m pytest -q "$@"
