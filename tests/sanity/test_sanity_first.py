"""How `perftracker run --sanity` launches the check: the job's own launcher arguments, the check in place of the
script (live/attach/sanity_first.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perftracker.errors import UsageError
from perftracker.live.attach.sanity_first import sanity_command

OUT = Path("/runs/r1/sanity")
CHECK = ["-m", "perftracker", "sanity", "-o", str(OUT), "--time-box", "20"]


def test_a_torchrun_launch_keeps_its_launcher_arguments_and_runs_the_check_in_place_of_the_script() -> None:
    # GIVEN a multi-node torchrun launch with options that take values, a flag, and the script's own arguments
    launch = ["torchrun", "--nnodes", "4", "--node_rank=1", "--nproc-per-node", "8", "--standalone",
              "--rdzv-endpoint", "head:29500", "train.py", "--lr", "0.1", "--nnodes", "9"]
    # WHEN the check's command is made
    # THEN the launcher's arguments are kept, the script and its arguments are replaced by the check
    assert sanity_command(launch, OUT, 20) == [*launch[:9], *CHECK]


def test_python_m_torch_distributed_run_and_a_module_job_are_read_too() -> None:
    # GIVEN `python -m torch.distributed.run ... -m pkg.train` (the job is a module: torchrun's -m flag)
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "pkg.train", "--x", "1"]
    # THEN the launcher prefix stays, torchrun's -m flag is not doubled, the check is the module run
    assert sanity_command(launch, OUT, 20) == [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                               *CHECK]


def test_a_plain_python_job_is_checked_alone_and_another_launcher_is_refused_with_what_to_do() -> None:
    # GIVEN a one-process job, and an srun launch
    assert sanity_command(["python3", "train.py"], OUT, 20) == [sys.executable, *CHECK]
    # THEN srun is a usage error that says how to run the check under it
    with pytest.raises(UsageError, match="torchrun launches") as err:
        sanity_command(["srun", "-N", "4", "python", "train.py"], OUT, 20)
    assert "python -m perftracker sanity" in str(err.value.__dict__)


def test_the_check_s_folder_in_a_run_directory_is_not_an_input_nor_a_note(tmp_path: Path) -> None:
    # GIVEN a run directory (a manifest) holding the check's output in sanity/, and a stray output folder beside it
    from perftracker.analyzers.sanity.judge import judge
    from perftracker.analyzers.sanity.results import SanityResults
    from perftracker.cli.sanity import write_outputs
    from perftracker.rundir import SANITY_DIR, discover, write_manifest

    write_manifest(tmp_path, created_by="perftracker run")
    results = SanityResults(hosts=["n0"], records={0: {"rank": 0, "local_rank": 0, "host": "n0", "device": "cpu",
                                                        "figures": {"gemm_fp32_tflops": 0.1}, "errors": {},
                                                        "pairs": [], "node": {}}}, time_box_s=20)
    for name in (SANITY_DIR, "other-out"):
        write_outputs(tmp_path / name, results, judge(results))
    # WHEN its inputs are found
    found = discover(tmp_path)
    # THEN neither folder is read; the stray one is said, the check's own is not
    assert not [f for f in found.files if SANITY_DIR in f.parts or "other-out" in f.parts]
    assert [p.name for p, _ in found.skipped] == ["other-out"]
