#!/usr/bin/env bash
# Refresh perftracker/reports/assets/plotly-cartesian.min.js.gz: plotly.js's own "cartesian" partial bundle
# (bar, box, contour, heatmap, histogram*, image, pie, scatter, scatterternary, violin), at the plotly.js
# version the installed plotly.py ships (tests/reports/test_report_size.py checks they match), gzip-compressed.
# Needs npm and the npm registry. Usage: bash scripts/vendor_plotly.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
version=$("$PY" -c 'import re; from plotly.offline import get_plotlyjs; print(re.search(r"plotly\.js v(\d+\.\d+\.\d+)", get_plotlyjs()[:400]).group(1))')
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "plotly.js-cartesian-dist-min@$version" >/dev/null && tar xzf ./*.tgz)
gzip -9n -c "$work/package/plotly-cartesian.min.js" > perftracker/reports/assets/plotly-cartesian.min.js.gz
cp "$work/package/LICENSE" perftracker/reports/assets/PLOTLY_LICENSE
echo "plotly.js cartesian $version -> perftracker/reports/assets/ ($(stat -c %s perftracker/reports/assets/plotly-cartesian.min.js.gz) bytes)"
