"""The Python API as a notebook uses it, cell by cell (tests/api/test_api.py runs this file in CI).

Run it in a perftracker checkout: `python docs/examples/python_api.py [CHECKOUT] [OUT]` (CHECKOUT: the
checkout's root, default the current folder; OUT: where the last cell writes a report, default: nothing is
written). The runs are the checkout's sample_traces/ and two real runs of one job from tests/fixtures/accuracy/.
"""

import sys
from pathlib import Path

import perftracker

checkout = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
samples, runs = checkout / "sample_traces", checkout / "tests" / "fixtures" / "accuracy"

# %% Analyze a run: everything stays in memory
run = perftracker.analyze(samples / "ddp-gloo-4rank-slow-rank2")
print(run.verdict)

# %% The findings, ranked, as a table (in Jupyter, `run` alone shows the verdict and this table)
frame = run.findings_frame()
print(frame[["severity", "title", "seconds_per_step"]].to_string(max_colwidth=70))

# %% Any report view is a DataFrame: step times per rank, here the median step of each rank in ms
steps = run.view("steps")
print((steps.groupby("rank")["dur_ns"].median() / 1e6).round(2).to_string())

# %% The evidence of the top finding, as the report shows it
top = run.findings[0]
print(top.id, top.ranks, dict(top.evidence).keys())

# %% Compare two runs of one job (the second with extra work on rank 2): the comparison of `perftracker diff`
change = perftracker.diff(runs / "clean-repro-a", runs / "inproc-rank2-x5-repro")
print(change.verdict)
print(change.findings_frame()[["severity", "title"]].to_string(max_colwidth=70))

# %% Write the report only when asked: findings.json, tables/ and report.html
if len(sys.argv) > 2:
    print(run.write(sys.argv[2]))
