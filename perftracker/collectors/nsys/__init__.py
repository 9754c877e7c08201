"""Nsight Systems input: `nsys export --type sqlite` files (and `.nsys-rep` reports, exported when `nsys` is
on PATH) read into the same Store tables as the Kineto path (`collectors/traces/kineto.py`).

`database.py` opens an export read-only and immutable and says which tables and columns it has; `rows.py`
reads the activity tables with explicit column lists and row caps; `nvtx.py` classifies NVTX ranges (op
ranges of `--pytorch=autograd-nvtx`, NCCL's domain, step ranges); `tables.py` turns one rank's rows into
`events` and `steps`; `load.py` splits a file into ranks (each device of each process) and hands the
loader one `FileResult` per rank; `export.py` turns a `.nsys-rep` into a `.sqlite` with `nsys export`.
"""
