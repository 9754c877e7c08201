"""The real-world corpus in shared/nccl_logs: every file parses and its listed facts are extracted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.nccl.config import analyze_nccl_config, flags
from perftracker.analyzers.nccl.context import build_context, summarize
from perftracker.collectors.nccl.log import load_nccl_logs
from perftracker.store import Store

from .conftest import SHARED_LOGS

EXPECTED = SHARED_LOGS / "expected.json"


def _expected() -> dict[str, Any]:
    if not EXPECTED.is_file():
        return {}
    data: dict[str, Any] = json.loads(EXPECTED.read_text())
    return data


def _store(name: str) -> Store:
    frames, notes = load_nccl_logs([SHARED_LOGS / name])
    assert not [n for n in notes if n.level != "info"]
    return Store(tables=dict(frames))


@pytest.fixture(autouse=True)
def _need_corpus() -> None:
    if not EXPECTED.is_file():
        pytest.skip("shared/nccl_logs is not present beside the repository")


@pytest.mark.parametrize("name", sorted(_expected()) or ["none"])
def test_corpus_file_facts_and_flags(name: str) -> None:
    # GIVEN a real log excerpt and its ground truth
    expected = _expected()[name]
    # WHEN it is parsed and analysed with no profile and no sysfs
    store = _store(name)
    summary = summarize(build_context(store))
    raised = flags(analyze_nccl_config(Analysis(store)))
    # THEN the summary facts match and the must / must-not flags hold
    for key in ("transport", "link_layer", "nccl_version", "nranks", "hosts", "warn_lines"):
        assert summary[key] == expected[key], key
    assert set(expected["must_flag"]) <= raised
    assert not set(expected["must_not_flag"]) & raised


def test_every_corpus_log_parses_without_error() -> None:
    # GIVEN all 20 logs WHEN parsed together THEN there are no error notes and each file gave facts
    paths = sorted(SHARED_LOGS.glob("*.log"))
    frames, notes = load_nccl_logs(paths)
    assert not [n for n in notes if n.level == "error"]
    assert set(frames["nccl"]["file"]) == {str(p) for p in paths}


def _facts(name: str, key: str) -> list[str]:
    frame = _store(name)["nccl"]
    return list(frame.loc[frame["key"] == key, "value"])


def test_sources_md_details() -> None:
    # GIVEN the per-file ground truth of SOURCES.md WHEN parsed THEN the listed details are extracted
    nics = {json.loads(v)["hca"] for v in _facts("01_horovod-roce-34hca-socket-mix_2.4.2.log", "nic")}
    assert len(nics) == 34
    socket = {json.loads(v)["iface"] for v in _facts("01_horovod-roce-34hca-socket-mix_2.4.2.log", "socket_if")}
    assert "flannel.1" in socket
    assert "GPU 2[2] / HCA 0 (distance 3 >= 2)" in _facts("03_mlnx-peermem-ib-gdr-disabled-distance_2.4.7.log",
                                                          "gdr_disabled")
    assert "NCCL_IB_DISABLE=0" in _facts("03_mlnx-peermem-ib-gdr-disabled-distance_2.4.7.log", "env")
    boot = [json.loads(v) for v in _facts("07_socket-fallback-ib-no-device_2.14.3.log", "bootstrap")]
    assert {"iface": "enp129s0f0", "addr": "10.0.119.255"} in boot
    warn = _facts("13_roce-ibv-modify-qp-no-such-device_2.7.8.log", "warn")
    assert warn == ["misc/ibvwrap.cc:284 Call to ibv_modify_qp failed with error No such device"]
    chain = [json.loads(v) for v in _facts("13_roce-ibv-modify-qp-no-such-device_2.7.8.log", "error_chain")]
    assert chain[-1] == {"src": "group.cc:73", "code": 2, "thread": "Async thread"}
    err = json.loads(_facts("16_deepspeed-ibplugin-error12-init-complete_2.14.3.log", "completion_error")[0])
    assert (err["peer"], err["status"], err["vendor_err"]) == ("10.226.98.98", 12, 129)
    timings = [json.loads(v) for v in _facts("21_ib-hca-exclude-init-timings-p2p-direct_2.2x.log", "init_timings")]
    assert {t["total"] for t in timings} == {1.08}
    assert "P2P/direct pointer/read" in _facts("21_ib-hca-exclude-init-timings-p2p-direct_2.2x.log", "via")
    assert _facts("30_h20-rings-trees-pxn-disabled.log", "nnodes") == ["2"]
    legacy = _facts("35_ib-legacy-format-4hca_2.3.5.log", "nic")
    assert len(legacy) == 4
    assert "NCCL_IB_HCA=mlx5_4" in _facts("37_roce-single-hca-ib-hca-set_2.18.5.log", "env")
    qp = json.loads(_facts("39_roce-gid-index-0-linklocal-qp-info.log", "qp")[0])
    assert qp["gid_index"] == 0 and qp["link_local"] is True
    env41 = set(_facts("41_roce-bond-tencent-plugin-tc160-gid3-qps4-timeout21_2.26.5.log", "env"))
    assert {"NCCL_IB_TC=160", "NCCL_IB_GID_INDEX=3", "NCCL_IB_TIMEOUT=21", "NCCL_IB_QPS_PER_CONNECTION=4",
            "NCCL_NET_GDR_LEVEL=PIX", "NCCL_SOCKET_IFNAME=bond0"} <= env41
    assert "NET/NCCL RDMA Plugin v6/0(0)/GDRDMA/Shared" in _facts(
        "41_roce-bond-tencent-plugin-tc160-gid3-qps4-timeout21_2.26.5.log", "via")
    sharp = [json.loads(v) for v in _facts("47_ib-sharp-ibext-4hca-ipoib-oob.log", "nic")]
    assert all(n["sharp"] for n in sharp) and len({n["hca"] for n in sharp}) == 4


def test_profile_comparison_on_log_echoes() -> None:
    # GIVEN log 41's echoes (TC 160, QPS 4, TIMEOUT 21) WHEN checked against pai-lingjun THEN each deviation shows
    from perftracker.collectors.nccl.profiles import load_profile

    store = _store("41_roce-bond-tencent-plugin-tc160-gid3-qps4-timeout21_2.26.5.log")
    store.run_info.nccl_profile = load_profile("pai-lingjun")
    titles = " ".join(f.title for f in analyze_nccl_config(Analysis(store)))
    assert "NCCL_IB_TC='160'" in titles
    assert "NCCL_IB_QPS_PER_CONNECTION=4 is below" in titles
    assert "NCCL_IB_TIMEOUT=21 is below the pai-lingjun" in titles
    assert "A net plugin was loaded" in titles
