"""The names of the files and folders an analysis or a comparison writes: the one list, below every room.

Promise: constants only (no imports), so that the writers (`outputs.py`), the walkers that must skip an earlier
output (`containment.py`, `rundir.py`), the commands and the watcher name these files the same way.
"""

FINDINGS = "findings.json"
REPORT = "report.html"
TABLES = "tables"
DIFF_JSON = "diff.json"
DIFF_HTML = "diff.html"
TIMELINE = "timeline.json.gz"
