"""The NCCL line classifier's prefix table, one branch at a time, on real NCCL_DEBUG=INFO lines (the text after
`NCCL INFO `): each from /work/shared/nccl_logs unless marked otherwise. The "Initialized NET plugin" and
"Assigned NET plugin" lines are in none of those logs: they are NCCL 2.2x's own lines as they appear in public
NCCL_DEBUG=INFO logs on GitHub (NCCL prints them from plugin/net.cc since 2.23: "Initialized NET plugin %s",
"Assigned NET plugin %s to comm")."""

from __future__ import annotations

import json

import pytest

from perftracker.collectors.nccl.lines import _EARLY, _PREFIXES, ProcFacts, classify_message

# (line, the fact key it records, a part of the value, what classify_message answers)
LINES = {
    "Chan": ("Channel 00 : 3[4a000] -> 6[44000] [send] via NET/IB/0/GDRDMA", "via", "NET/IB/0/GDRDMA", None),
    "Ring": ("Ring 00 : 34 -> 33 [send] via NET/Socket/0", "via", "NET/Socket/0", None),
    "Tree": ("Trees [0] -1/-1/-1->1->0 [1] 0/3/-1->1->-1", "tree", "Trees", None),
    "NET/": ("NET/Socket : Using [0]ens3:172.31.10.182<0>", "socket_if", "ens3", None),
    "NET ": ("NET : Using interface enp1s0f0:100.97.16.164<0>", "bootstrap", "enp1s0f0", None),
    "NCCL": ("NCCL_IB_GID_INDEX set by environment to 0.", "env", "NCCL_IB_GID_INDEX=0", "NCCL_IB_GID_INDEX=0"),
    "Init": ("Init timings: rank 2 nranks 16 total 1.08 (kernels 0.51, bootstrap 0.22, allgathers 0.01, topo 0.28, "
             "graphs 0.04, connections 0.02, rest 0.01)", "init_timings", '"total":1.08', None),
    "Boot": ("Bootstrap : Using [0]eth1:9.73.133.81<0>", "bootstrap", "eth1", None),
    "Usin": ("Using network IBext", "network", "IBext", None),
    "Conn": ("Connected all trees", "connected", "Connected all trees", None),
    "Fail": ("Failed to open libibverbs.so[.1]", "ibverbs_missing", "libibverbs", None),
    "cuda": ("cudaDriverVersion 12040", "cuda_driver", "12040", None),
    "Plug": ("Plugin Path : /usr/local/lib/libnccl-net.so", "plugin_path", "/usr/local/lib/libnccl-net.so", None),
    "P2P ": ("P2P plugin IBext", "net_plugin", "IBext", None),
    "TUNE": ("TUNER/Plugin: Failed to find ncclTunerPlugin_v2, using internal tuner instead.", "plugin_note",
             "TUNER/Plugin", None),
    "PROF": ("PROFILER/Plugin: Could not find: libnccl-profiler.so. ", "plugin_note", "PROFILER/Plugin", None),
    "Assi": ("Assigned NET plugin Socket to comm", "net_plugin", "Socket", None),  # public log, see above
    # The topology and graph lines (NCCL_DEBUG_SUBSYS=GRAPH), as public logs print them (tests/fixtures/nccl_public)
    "=== ": ("=== System : maxBw 240.0 totalBw 240.0 ===", "topo_system", '"max_bw":240.0', None),
    "GPU/": ("GPU/0-8000 :GPU/0-8000 (0/5000.0/LOC) GPU/0-9000 (1/240.0/NVL) CPU/0-0 (2/24.0/PHB)", "topo_path",
             '"type":"NVL"', None),
    "Patt": ("Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1",
             "graph_pattern", '"nchannels":12', None),
    "NVLS": ("NVLS multicast support is available on dev 7", "nvls", "available", None),
    "Chec": ("Check P2P Type isAllDirectP2p 0 directMode 0", "p2p_type", "isAllDirectP2p 0", None),
}


def _classified(message: str) -> tuple[str | None, dict[str, list[str]]]:
    proc = ProcFacts("host", 1, 0)
    answer = classify_message(message, proc, 7)
    facts: dict[str, list[str]] = {}
    for key, value in proc.facts:
        facts.setdefault(key, []).append(value)
    return answer, facts


@pytest.mark.parametrize("prefix", sorted(LINES))
def test_each_prefix_of_the_table_records_its_fact(prefix: str) -> None:
    # GIVEN a real line starting with one prefix of the table
    line, key, part, expected = LINES[prefix]
    # WHEN it is classified
    answer, facts = _classified(line)
    # THEN its handler recorded the fact, and the line counts as understood (or as the env echo it is)
    assert answer == expected and key in facts and any(part in v for v in facts[key]), facts


def test_every_prefix_of_the_table_has_a_real_line_here() -> None:
    # GIVEN the classifier's prefix tables; THEN each prefix has its test line above (a new branch needs one)
    assert set(_EARLY) | set(_PREFIXES) == set(LINES)


def test_an_initialized_net_plugin_line_names_the_plugin() -> None:
    # GIVEN NCCL's "Initialized NET plugin" line (public NCCL_DEBUG=INFO logs of NCCL 2.2x; it starts with "Init",
    # like the init timings, which used to take it and drop it)
    for line, plugin in (("Initialized NET plugin Socket", "Socket"), ("Initialized NET plugin IB", "IB")):
        # WHEN it is classified
        answer, facts = _classified(line)
        # THEN the plugin is recorded, and the line is understood
        assert answer is None and facts == {"net_plugin": [plugin]}, facts


def test_lines_known_by_their_content_and_unknown_lines() -> None:
    # GIVEN lines no prefix claims: a channel summary, an error chain (real), a "Fail..." line that is not
    # about libibverbs, and a line nobody knows
    summary = "8 coll channels, 8 collnet channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer"
    answer, facts = _classified(summary)
    assert answer is None and json.loads(facts["channels"][0]) == {"coll": "8", "collnet": "8", "nvls": "0",
                                                                     "p2p": "8"}
    answer, facts = _classified("transport/net_ib.cc:395 -> 2")
    assert answer is None and json.loads(facts["error_chain"][0])["code"] == 2
    answer, facts = _classified("Failed to call ibv_open_device")  # the Fail prefix hands it on: an IB open error
    assert answer is None and "ib_open_failed" in facts
    assert _classified("Something NCCL may print one day") == ("", {})
