"""One finding per problem: one NCCL variable, interface or link seen in several sources is one finding."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.config import analyze_nccl_config, flags
from perftracker.analyzers.nccl.merge import problems
from perftracker.collectors.loading import LoadOptions, load_path
from perftracker.reports.text import print_summary

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "nccl-roce-2node-misconfig"


def _sample_findings() -> list[Finding]:
    return analyze_nccl_config(Analysis(load_path(SAMPLE, LoadOptions(workers=1))))


def _about(findings: list[Finding], subject: str) -> list[Finding]:
    return [f for f in findings if f.evidence.get("subject") == subject]


def test_each_variable_of_the_roce_sample_is_one_finding_with_all_its_sources() -> None:
    # GIVEN the RoCE sample: NCCL_IB_TC=0136 (octal, echoed as 94), NCCL_IB_TIMEOUT 12/22, docker0 on nodeB
    # WHEN the NCCL rules run
    found = _sample_findings()
    # THEN each variable is one finding, which keeps every rule that fired and every source
    for var, expected_flags in (("NCCL_IB_TC", {"loose_int", "echo_mismatch"}),
                                ("NCCL_IB_TIMEOUT", {"ib_timeout", "echo_mismatch", "inconsistent_env"}),
                                ("NCCL_SOCKET_IFNAME", {"bad_socket_iface", "inconsistent_env"})):
        merged = _about(found, var)
        assert len(merged) == 1, [f.title for f in merged]
        assert expected_flags <= {p["flag"] for p in problems(merged[0])}
        assert merged[0].evidence["env"] and merged[0].evidence["log"], merged[0].evidence
        assert set(merged[0].hosts) == {"nodeA", "nodeB"}
    # AND docker0 is named by one finding only
    assert sum("docker0" in f.title for f in found) == 1
    # AND the WARN lines that are the completion errors join the link's critical finding
    link = [f for f in found if f.evidence["flag"] == "ib_completion_error"]
    assert len(link) == 1 and link[0].severity == Severity.CRITICAL
    assert "nccl_warn" in {p["flag"] for p in problems(link[0])}
    assert not [f for f in found if f.evidence["flag"] == "nccl_warn"]
    # AND every problem class is still raised
    assert {"loose_int", "echo_mismatch", "ib_timeout", "inconsistent_env", "bad_socket_iface", "nccl_warn",
            "ib_completion_error", "slow_init"} <= flags(found)
    # AND the sample holds 5 NCCL findings (was 12: the same variable counted by each rule)
    assert len(found) == 5, [f.title for f in found]


def test_merged_finding_keeps_the_most_severe_problem_first() -> None:
    # GIVEN the RoCE sample's findings
    found = _sample_findings()
    # THEN no merged finding is less severe than one of its problems, and its title says how many more
    for f in found:
        rest = problems(f)[1:]
        assert all(Severity.parse(p["severity"]) <= f.severity for p in rest)
        if rest:
            assert f"and {len(rest)} more problem" in f.title


def test_terminal_table_shows_hosts_for_host_findings() -> None:
    # GIVEN findings that point at hosts and not at ranks
    found = _sample_findings()
    out = io.StringIO()
    # WHEN the terminal summary is printed
    print_summary(Console(file=out, width=160), found, None)
    text = out.getvalue()
    # THEN the table has a hosts column, and the slow-init finding (no ranks; its title names no host)
    # shows its host on its row
    assert "hosts" in text.splitlines()[1] or "hosts" in text.splitlines()[2]
    row = next(line for line in text.splitlines() if "NCCL communicator init took" in line)
    assert "nodeA" in row
