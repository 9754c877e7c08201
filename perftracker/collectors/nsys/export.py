"""The loader's entry for Nsight Systems inputs: export the reports, read the exports.

Promise: `read_nsys_inputs(found, comm_kernels, step_name)` reads the Nsight Systems inputs the input kinds
found and returns their `FileResult`s (`load.read_export`, one per rank). A report is exported into a temporary
folder when `nsys` is on PATH, else a note says how to export it; nothing is written next to the inputs.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from perftracker.collectors.nsys.database import time_budget
from perftracker.collectors.nsys.load import read_export
from perftracker.collectors.traces.comm_kernels import CommKernels
from perftracker.collectors.traces.trace_map import FileResult

_REPORTS = (".nsys-rep", ".qdrep")


def read_nsys_inputs(found: list[Path], comm_kernels: CommKernels, step_name: str = "") -> list[FileResult]:
    """FileResults of the Nsight Systems inputs `found` (exports and reports), one per rank."""
    if not found:
        return []
    exports = {p.with_suffix("") for p in found if p.name.lower().endswith(".sqlite")}
    results: list[FileResult] = []
    for path in found:
        if not path.name.lower().endswith(_REPORTS):
            results.extend(read_export(path, comm_kernels, step_name))
        elif Path(str(path)[: -len(path.suffix)]) in exports:
            continue  # its export lies beside it and is read
        else:
            results.extend(_export_and_read(path, comm_kernels, step_name))
    return results


def _export_and_read(report: Path, comm_kernels: CommKernels, step_name: str) -> list[FileResult]:
    nsys = shutil.which("nsys")
    how = f"nsys export --type sqlite -o {report.with_suffix('.sqlite')} {report}"
    if nsys is None:
        return [FileResult(str(report), False, error=f"{report}: an Nsight Systems report, and `nsys` is not on "
                           f"PATH to export it; export it where Nsight Systems is installed ({how}) and put the "
                           ".sqlite beside it")]
    with tempfile.TemporaryDirectory(prefix="perftracker-nsys-") as folder:
        out = Path(folder) / (report.stem + ".sqlite")
        try:
            done = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
                                   str(out), str(report)], capture_output=True, timeout=time_budget(), check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return [FileResult(str(report), False, error=f"{report}: `nsys export` failed ({exc}); run {how}")]
        if done.returncode != 0 or not out.is_file():
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            return [FileResult(str(report), False, error=f"{report}: `nsys export` exited {done.returncode} "
                               f"({tail[0][:200]}); run {how}")]
        results = read_export(out, comm_kernels, step_name)
    for r in results:  # the inputs are the report, not the temporary export
        r.path = str(report)
        r.error = r.error.replace(str(out), str(report))
    return results
