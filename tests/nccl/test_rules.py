"""Each NCCL rule on project-written inputs: env dicts, fake sysfs trees and fixture logs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.nccl.config import analyze_nccl_config, flags
from perftracker.analyzers.nccl.merge import problems
from perftracker.collectors.nccl.log import load_nccl_logs
from perftracker.store import Store

from .conftest import FIXTURES, build_sysfs, lingjun_node

MakeStore = Callable[..., Store]


def _run(store: Store) -> list[Finding]:
    return analyze_nccl_config(Analysis(store))


def _titles(findings: list[Finding]) -> str:
    return " | ".join(f.title for f in findings)


def test_no_inputs_gives_no_findings(make_store: MakeStore) -> None:
    assert _run(make_store()) == []


def test_pai_lingjun_block_on_matching_node_is_clean(tmp_path: Path, make_store: MakeStore) -> None:
    # GIVEN the verbatim Lingjun block on a node with mlx5 RoCE v2 at GID 3 and eth0
    from perftracker.collectors.env import read_env_file

    env = {k: v for k, (v, _) in read_env_file(FIXTURES / "pai_lingjun.env").items()}
    store = make_store([env], sysfs_root=lingjun_node(tmp_path), profile="pai-lingjun")
    # THEN nothing is reported, although mlx5 and eth are prefixes
    assert _run(store) == []


@pytest.mark.parametrize("hca,needle,sev", [
    ("mlx5_9", "matches no RDMA device", Severity.CRITICAL),
    ("mlx5_1", "'mlx5_1' is a prefix: it also selects mlx5_10", Severity.WARNING),
    ("mlx5_0, mlx5_1", "has spaces", Severity.WARNING),
    ("=^mlx5_0", "order must be '^='", Severity.WARNING),
    ("mlx5_0:x", "is not a number", Severity.WARNING),
])
def test_ib_hca(tmp_path: Path, make_store: MakeStore, hca: str, needle: str, sev: Severity) -> None:
    root = build_sysfs(tmp_path, [{"name": n} for n in ("mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11")])
    found = [p for f in _run(make_store([{"NCCL_IB_HCA": hca}], sysfs_root=root)) for p in problems(f)
             if needle in p["title"]]
    assert found and found[0]["severity"] == sev.label and found[0]["flag"] == "hca_problem"


def test_ib_hca_differs_across_ranks(make_store: MakeStore) -> None:
    store = make_store([{"NCCL_IB_HCA": "=mlx5_0", "RANK": "0"}, {"NCCL_IB_HCA": "=mlx5_1", "RANK": "1"}])
    assert "NCCL_IB_HCA differs across ranks" in _titles(_run(store))


@pytest.mark.parametrize("idx,needle", [("0", "link-local GID"), ("2", "RoCE v1 GID"), ("5", "empty slot"),
                                         ("300", "outside the GID table")])
def test_gid_index_against_sysfs(tmp_path: Path, make_store: MakeStore, idx: str, needle: str) -> None:
    root = build_sysfs(tmp_path, [{"name": "mlx5_0", "netdev": "eth0"}])
    found = [f for f in _run(make_store([{"NCCL_IB_GID_INDEX": idx}], sysfs_root=root)) if needle in f.title]
    assert found and found[0].evidence["flag"] == "gid_problem"
    assert "NCCL_IB_GID_INDEX=3" in found[0].recommendation


def test_gid_index_without_sysfs_on_roce_profile(make_store: MakeStore) -> None:
    store = make_store([{"NCCL_IB_GID_INDEX": "1"}], profile="pai-lingjun")
    assert "gid_problem" in flags(_run(store))


@pytest.mark.parametrize("env,needle", [
    ({"NCCL_IB_TC": "300"}, "outside 0-255"),
    ({"NCCL_IB_TC": "34"}, "looks like a DSCP value"),
    ({"NCCL_IB_TC": "106"}, "sets ECN bits"),
    ({"NCCL_IB_SL": "16"}, "outside 0-15"),
    ({"NCCL_IB_TIMEOUT": "0"}, "infinite ACK timeout"),
    ({"NCCL_IB_TIMEOUT": "32"}, "infinite ACK timeout"),
    ({"NCCL_IB_TIMEOUT": "26"}, "before a link error surfaces"),
    ({"NCCL_IB_RETRY_CNT": "13"}, "outside the 3-bit range"),
    ({"NCCL_IB_QPS_PER_CONNECTION": "0"}, "outside 1-128"),
    ({"NCCL_ALGO": "Ring"}, "forces NCCL's algorithm"),
    ({"NCCL_PROTO": "LL128"}, "forces NCCL's protocol"),
    ({"NCCL_DEBUG": "TRACE"}, "TRACE in a production run"),
    ({"NCCL_DEBUG": "DEBUG"}, "not a level NCCL knows"),
    ({"NCCL_DEBUG_SUBSYS": "ALL"}, "logs every subsystem"),
    ({"NCCL_DEBUG": "INFO", "LOCAL_WORLD_SIZE": "8"}, "ranks per node log NCCL INFO"),
    ({"NCCL_IB_TC": "0136"}, "read by NCCL as 94"),
    ({"NCCL_IB_TIMEOUT": "22abc"}, "read by NCCL as 22"),
    ({"NCCL_IB_SL": "abc"}, "read by NCCL as 0"),
    ({"NCCL_SOCKET_IFNAME": "docker0"}, "selects docker0"),
    ({"PATH_UNRELATED": "1", "WORLD_SIZE": "2"}, "NCCL_DEBUG is not set"),
])
def test_value_rules(make_store: MakeStore, env: dict[str, str], needle: str) -> None:
    assert needle in _titles(_run(make_store([env])))


def test_timeout_below_version_default_uses_log_version(make_store: MakeStore) -> None:
    # GIVEN a log saying NCCL 2.23.4 and NCCL_IB_TIMEOUT=19 in the env
    frames, _ = load_nccl_logs([FIXTURES / "debug_files" / "nodeC.3001.log"])
    store = make_store([{"NCCL_IB_TIMEOUT": "19"}], frames=frames)
    assert "below NCCL 2.23.4's default 20" in _titles(_run(store))


def test_qps_below_profile_on_roce(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store([{"NCCL_IB_QPS_PER_CONNECTION": "4"}], sysfs_root=lingjun_node(tmp_path), profile="pai-lingjun")
    assert "below the pai-lingjun profile's 8" in _titles(_run(store))


def test_socket_ifname_against_interfaces(tmp_path: Path, make_store: MakeStore) -> None:
    root = build_sysfs(tmp_path, [{"name": "mlx5_0", "netdev": "eth0"}], ifaces=("lo", "docker0", "eth1"))
    titles = _titles(_run(make_store([{"NCCL_SOCKET_IFNAME": "e"}, {"NCCL_SOCKET_IFNAME": "ens"}], sysfs_root=root)))
    assert "NCCL_SOCKET_IFNAME='ens' matches no interface" in titles
    titles = _titles(_run(make_store([{"NCCL_SOCKET_IFNAME": "^eth"}], sysfs_root=root)))
    assert "also matches lo, docker0" in titles or "also matches docker0, lo" in titles
    assert "prefix that matches 2 interfaces" in _titles(_run(make_store([{"NCCL_SOCKET_IFNAME": "eth"}],
                                                                         sysfs_root=root)))


def test_log_rules_on_fixture_logs(make_store: MakeStore) -> None:
    # GIVEN two nodes on flannel, one without libibverbs and P2P disabled, the other with no IB device
    frames, _ = load_nccl_logs(sorted((FIXTURES / "debug_files").glob("*.log")))
    store = make_store([], frames=frames)
    found = _run(store)
    raised = flags(found)
    assert {"socket_fallback", "hca_problem", "bad_socket_iface", "p2p_disabled", "inconsistent_env",
            "forced_tuning"} <= raised
    fallback = next(f for f in found if f.evidence["flag"] == "socket_fallback")
    assert fallback.severity == Severity.CRITICAL and fallback.hosts == ("nodeC", "nodeD")
    hca = next(f for f in found if f.evidence["flag"] == "hca_problem")
    assert "NCCL_IB_HCA is set" in hca.evidence["cause"]


def test_mixed_job_log_rules(make_store: MakeStore) -> None:
    # GIVEN the mixed job output: docker0 OOB on nodeB, completion errors, slow init, echo TC=94
    frames, _ = load_nccl_logs([FIXTURES / "mixed_job.log"])
    found = _run(make_store([{"NCCL_IB_TC": "0136", "HOSTNAME": "nodeA", "RANK": "0"}], frames=frames))
    by_flag = {p["flag"]: p for f in found for p in problems(f)}
    err = by_flag["ib_completion_error"]
    assert err["title"].startswith("IB completion errors on link nodeB -> 10.1.0.1 (2x, status 12)")
    assert "RETRY_EXC_ERR" in err["recommendation"]
    assert "docker" in by_flag["bad_socket_iface"]["title"]
    assert by_flag["slow_init"]["evidence"]["total_s"] == 42.5 and "bootstrap" in by_flag["slow_init"]["title"]
    assert by_flag["nccl_warn"]["evidence"]["warn_lines"] == 2
    assert "configured as '0136' but NCCL reports '94'" in by_flag["echo_mismatch"]["title"]
    assert "hca_problem" not in by_flag  # mlx5_1 prefix: no other device known in this log


def test_net_plugin_rules(make_store: MakeStore) -> None:
    log41 = Path(__file__).resolve().parents[2] / ".." / "shared" / "nccl_logs" / \
        "41_roce-bond-tencent-plugin-tc160-gid3-qps4-timeout21_2.26.5.log"
    frames, _ = load_nccl_logs([FIXTURES / "debug_files" / "nodeC.3001.log"])
    store = make_store([{"NCCL_NET_PLUGIN": "aws-ofi"}], frames=frames)
    assert "NCCL_NET_PLUGIN=aws-ofi did not load" in _titles(_run(store))
    if log41.is_file():
        frames, _ = load_nccl_logs([log41])
        assert "A net plugin was loaded" in _titles(_run(make_store([{"NCCL_NET_PLUGIN": "none"}], frames=frames)))
        assert "NCCL_NET='IB' but NCCL used" in _titles(_run(make_store([{"NCCL_NET": "IB"}], frames=frames)))


def test_ib_disabled_while_rdma_present(tmp_path: Path, make_store: MakeStore) -> None:
    root = build_sysfs(tmp_path, [{"name": "mlx5_0"}])
    found = [f for f in _run(make_store([{"NCCL_IB_DISABLE": "1"}], sysfs_root=root))
             if f.evidence["flag"] == "socket_fallback"]
    assert found and found[0].severity == Severity.CRITICAL


def test_inconsistent_values_across_hosts(make_store: MakeStore) -> None:
    store = make_store([{"NCCL_IB_TIMEOUT": "22", "HOSTNAME": "a"}, {"NCCL_IB_TIMEOUT": "20", "HOSTNAME": "b"}])
    f = next(f for f in _run(store) if f.evidence["flag"] == "inconsistent_env")
    assert f.hosts == ("a", "b")


def test_findings_are_json_serialisable_and_costless(make_store: MakeStore) -> None:
    import json

    frames, _ = load_nccl_logs([FIXTURES / "mixed_job.log"])
    for f in _run(make_store([{"NCCL_IB_TC": "34"}], frames=frames)):
        json.dumps(f.to_dict())
        assert f.cost.seconds_per_step == 0
