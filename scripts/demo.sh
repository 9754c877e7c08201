#!/usr/bin/env bash
# Set up a fresh environment and analyze the bundled sample runs; prints where the reports are.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e .
perftracker demo -o perftracker-demo
echo
echo "The perftracker command is in .venv: run '. .venv/bin/activate' first (then 'perftracker --help'),"
echo "or call it as .venv/bin/perftracker."
