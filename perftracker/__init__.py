"""perftracker: name the cause of a slow or stuck distributed training job, with evidence.

The package promises one flow: collectors write (or read) artifacts, loaders build a Store of typed
tables, analyzers turn the Store into Findings, reports render Store + Findings.
"""

__version__ = "0.1.0"
