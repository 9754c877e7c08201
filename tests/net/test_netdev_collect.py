"""Ethernet interface and TCP counters: read from sysfs and /proc, from tc's JSON, and from the dumps users have
(`ip -s link`, /sys/class/net grep dumps, node exporter), all into the same `netdev` rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from net.conftest import FakeNetNode
from perftracker.collectors.counters import netdev, netdev_dumps
from perftracker.collectors.counters.inputs import load_counter_inputs
from perftracker.collectors.counters.netroutes import (
    ifname_matches,
    job_interfaces,
    normal_address,
    parse_routes,
    parse_routes6,
    route_iface,
)
from perftracker.collectors.loading import LoadOptions, load_path

T0 = 1_796_000_000_000_000_000


def _rows(rows: list[dict[str, object]], iface: str = "eth0") -> dict[str, float]:
    return {str(r["name"]): float(r["value"]) for r in rows if r["iface"] == iface}  # type: ignore[arg-type]


def test_snapshot_reads_state_counters_qdisc_and_tcp_of_the_named_interfaces(tmp_path: Path) -> None:
    # GIVEN a node whose eth0 moved some bytes, has a tbf shaper and whose TCP stack retransmitted
    node = FakeNetNode(tmp_path)
    node.set("eth0", tx_bytes=12_345, rx_dropped=3)
    node.tcp(100, 200, 7, 2)
    qdisc = {"kind": "tbf", "rate_bps": 20_000_000, "overlimits": 40, "drops": 1, "backlog_bytes": 1500}
    # WHEN one sample of eth0 is taken (lo is not asked for)
    rec = netdev.snapshot("node-b", {"eth0": "GLOO_SOCKET_IFNAME=eth0"}, node.sys, node.proc,
                          qdisc_reader=lambda name: qdisc, ts_ns=T0, peers={"eth0": ["10.0.0.1"]})
    # THEN the record holds eth0's state, counters, qdisc, reason and peers, and the node's TCP counters
    eth0 = rec["ifaces"]["eth0"]
    assert list(rec["ifaces"]) == ["eth0"] and rec["host"] == "node-b" and rec["ts_ns"] == T0
    assert (eth0["operstate"], eth0["carrier"], eth0["admin_up"], eth0["speed_mbps"]) == ("up", 1, True, 10000)
    assert eth0["counters"]["tx_bytes"] == 12_345 and eth0["counters"]["carrier_changes"] == 2
    assert eth0["qdisc"] == qdisc and eth0["why"] == "GLOO_SOCKET_IFNAME=eth0" and eth0["peers"] == ["10.0.0.1"]
    assert rec["tcp"] == {"InSegs": 100, "OutSegs": 200, "RetransSegs": 7, "EstabResets": 1, "AttemptFails": 0,
                          "InErrs": 0, "OutRsts": 2, "TCPTimeouts": 2, "TCPLostRetransmit": 0}
    # AND its rows name every counter, gauge, qdisc counter and TCP counter
    rows, ifaces = netdev.record_rows(json.loads(json.dumps(rec)), "x")
    eth = _rows(rows)
    assert eth["operstate_up"] == 1 and eth["admin_up"] == 1 and eth["speed_mbps"] == 10000
    assert eth["tx_bytes"] == 12_345 and eth["rx_dropped"] == 3
    assert eth["qdisc_overlimits"] == 40 and eth["qdisc_rate_bps"] == 20_000_000
    assert _rows(rows, "")["tcp:RetransSegs"] == 7
    assert ifaces == [{"host": "node-b", "iface": "eth0", "why": "GLOO_SOCKET_IFNAME=eth0", "peers": "10.0.0.1", "addresses": "",
                       "qdisc": "tbf", "source": "x"}]


def test_an_interface_taken_down_reads_as_down_without_carrier_and_not_admin_up(tmp_path: Path) -> None:
    # GIVEN eth0 taken down (IFF_UP cleared: the kernel refuses to read its carrier and speed)
    node = FakeNetNode(tmp_path)
    node.set("eth0", operstate="down", flags="0x1002")
    (node.sys / "class/net/eth0/carrier").unlink()
    (node.sys / "class/net/eth0/speed").unlink()
    # WHEN it is read, as a full sample and as the watcher reads it
    full = netdev.read_iface(node.sys, "eth0")
    state = netdev.read_state(node.sys, "eth0")
    # THEN both say down, no carrier, not admin up; no speed is claimed
    assert full is not None and state is not None
    assert (full["operstate"], full["carrier"], full["admin_up"], full["speed_mbps"]) == ("down", 0, False, -1)
    assert state == {"operstate": "down", "carrier": 0, "admin_up": False}
    assert netdev.read_iface(node.sys, "eth9") is None and netdev.read_state(node.sys, "eth9") is None


def test_tc_json_gives_the_root_qdisc_and_a_shapers_rate_in_bits() -> None:
    # GIVEN `tc -s -j qdisc show dev eth0` of a tbf shaper at 20 Mbit/s (tc writes 2500000 bytes/s)
    text = json.dumps([{"kind": "tbf", "handle": "8001:", "root": True, "options": {"rate": 2500000, "burst": 8190},
                        "bytes": 900, "packets": 9, "drops": 2, "overlimits": 17, "requeues": 0, "backlog": 300,
                        "qlen": 1}, {"kind": "pfifo", "handle": "0:", "parent": "8001:"}])
    # WHEN parsed THEN the root's counters and rate come out; garbage gives None
    assert netdev.parse_tc_json(text) == {"kind": "tbf", "bytes": 900, "packets": 9, "drops": 2, "overlimits": 17,
                                          "requeues": 0, "backlog_bytes": 300, "rate_bps": 20_000_000}
    assert netdev.parse_tc_json("not json") is None and netdev.parse_tc_json("[]") is None


def test_routes_pick_the_longest_prefix_and_settings_match_as_nccl_and_gloo_do() -> None:
    # GIVEN a default route via eth1, the lab subnet on eth0, and an IPv6 route
    routes = parse_routes("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
                          "eth1\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
                          "eth0\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    routes += parse_routes6("fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
                            "00000000000000000000000000000000 00000100 00000001 00000000 00000001 ib0\n")
    # WHEN peers are routed THEN the most specific route wins; IPv4-mapped addresses are IPv4
    assert route_iface("10.77.0.2", routes) == "eth0" and route_iface("8.8.8.8", routes) == "eth1"
    assert route_iface("::ffff:10.77.0.3", routes) == "eth0" and route_iface("fd00::7", routes) == "ib0"
    assert route_iface("node-a", routes) is None and normal_address("::ffff:10.0.0.1") == "10.0.0.1"
    # AND NCCL_SOCKET_IFNAME matches by prefix (^ excludes, = exact); GLOO_SOCKET_IFNAME by exact names
    assert ifname_matches("NCCL_SOCKET_IFNAME", "eth", "eth0") and not ifname_matches("NCCL_SOCKET_IFNAME", "=eth",
                                                                                     "eth0")
    assert not ifname_matches("NCCL_SOCKET_IFNAME", "^eth,ib", "eth1") and ifname_matches("NCCL_SOCKET_IFNAME",
                                                                                          "^eth", "ib0")
    assert ifname_matches("GLOO_SOCKET_IFNAME", "eth0,eth1", "eth1") and not ifname_matches("GLOO_SOCKET_IFNAME",
                                                                                          "eth", "eth0")
    # AND the job's interfaces are those a setting selects and those its peers are reached by, never lo
    # or the node's own address
    chosen = job_interfaces({"GLOO_SOCKET_IFNAME": "eth0"}, {"10.77.0.2", "10.77.0.1", "127.0.0.1"},
                            ["lo", "eth0", "eth1"], routes, local={"10.77.0.1"})
    assert chosen == {"eth0": "GLOO_SOCKET_IFNAME=eth0; route to 10.77.0.2"}
    assert job_interfaces({}, {"8.8.8.8"}, ["lo", "eth0", "eth1"], routes) == {"eth1": "route to 8.8.8.8"}


IP_LINK = """1796000000.000000000
# host=node-b
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000
    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
    RX:  bytes packets errors dropped  missed   mcast
          100       1      0       0       0       0
    TX:  bytes packets errors dropped carrier collsns
          100       1      0       0       0       0
2: eth0@if3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc tbf state UP mode DEFAULT group default qlen 1000
    link/ether 02:fc:00:00:00:01 brd ff:ff:ff:ff:ff:ff
    RX:  bytes packets errors dropped  missed   mcast
         5000      50      0       1       0       0
    RX errors:  length    crc   frame    fifo overrun
                     0      2       0       0       0
    TX:  bytes packets errors dropped carrier collsns
         7000      70      0       0       0       0
    TX errors: aborted   fifo  window heartbt transns
                     0      0       0       0       2
1796000001.000000000
2: eth0@if3: <NO-CARRIER,BROADCAST,MULTICAST> mtu 1500 qdisc tbf state DOWN mode DEFAULT group default qlen 1000
    link/ether 02:fc:00:00:00:01 brd ff:ff:ff:ff:ff:ff
    RX: bytes  packets  errors  dropped overrun mcast
    6000       60       0       1       0       0
    TX: bytes  packets  errors  dropped carrier collsns
    9000       90       0       0       0       0
"""


def test_ip_s_link_dumps_become_the_same_rows_as_sysfs(tmp_path: Path) -> None:
    # GIVEN two `ip -s link` outputs (new and old iproute2 layouts) each after a `date +%s.%N` line
    path = tmp_path / "links.txt"
    path.write_text(IP_LINK)
    # WHEN loaded
    rows, ifaces, notes = netdev_dumps.load_ip_link_dump(path)
    # THEN eth0 is up with carrier, then taken down without one; counters carry their sysfs names
    first = {str(r["name"]): r["value"] for r in rows if r["iface"] == "eth0" and r["ts_ns"] == T0}
    second = {str(r["name"]): r["value"] for r in rows if r["iface"] == "eth0" and r["ts_ns"] == T0 + 10**9}
    assert first["operstate_up"] == 1 and first["carrier"] == 1 and first["admin_up"] == 1 and first["mtu"] == 1500
    assert first["rx_bytes"] == 5000 and first["rx_crc_errors"] == 2 and first["carrier_changes"] == 2
    assert second["operstate_up"] == 0 and second["carrier"] == 0 and second["admin_up"] == 0
    assert second["tx_bytes"] == 9000 and not notes
    assert {(i["host"], i["iface"]) for i in ifaces} == {("node-b", "lo"), ("node-b", "eth0")}


def test_sysfs_grep_dumps_and_node_exporter_text_are_read_too(tmp_path: Path) -> None:
    # GIVEN a `grep -H .` dump of /sys/class/net files and node exporter text with scrape times
    dump = tmp_path / "node-c.sysfs.txt"
    dump.write_text("# ts_ns=1796000000000000000\n/sys/class/net/eth0/operstate:up\n/sys/class/net/eth0/flags:0x1003\n"
                    "/sys/class/net/eth0/statistics/tx_bytes:10\n/sys/class/net/eth0/carrier_changes:2\n"
                    "1796000001.0\n/sys/class/net/eth0/operstate:down\n/sys/class/net/eth0/statistics/tx_bytes:20\n")
    prom = tmp_path / "node-d.prom"
    prom.write_text("# scrape_time 1796000000\nnode_network_transmit_bytes_total{device=\"eth0\"} 1e3\n"
                    "node_network_up{device=\"eth0\"} 1\nnode_network_speed_bytes{device=\"eth0\"} 1.25e9\n"
                    "node_netstat_Tcp_RetransSegs 5\n# scrape_time 1796000001\n"
                    "node_network_transmit_bytes_total{device=\"eth0\"} 3e3\nnode_network_up{device=\"eth0\"} 0\n")
    untimed = tmp_path / "node-e.prom"
    untimed.write_text("node_network_up{device=\"eth0\"} 1\n")
    # WHEN every file is loaded by content
    tables, notes, info = load_counter_inputs([dump, prom, untimed, tmp_path / "missing"])
    frame = tables["netdev"]
    # THEN each gives the same row names; the host comes from the file name; untimed samples are a note
    got = {(h, n, int(t)): v for h, n, t, v in zip(frame["host"], frame["name"], frame["ts_ns"], frame["value"])}
    assert got[("node-c", "operstate_up", T0 + 10**9)] == 0 and got[("node-c", "tx_bytes", T0 + 10**9)] == 20
    assert got[("node-c", "admin_up", T0)] == 1 and got[("node-c", "carrier_changes", T0)] == 2
    assert got[("node-d", "speed_mbps", T0)] == pytest.approx(10_000) and got[("node-d", "tx_bytes", T0 + 10**9)] == 3e3
    assert got[("node-d", "tcp:RetransSegs", T0)] == 5 and got[("node-d", "operstate_up", T0 + 10**9)] == 0
    assert info.counter_sources == {"sysfs_net_dump": 1, "node_network": 2}
    assert [n.source for n in notes] == [str(untimed)] and "scrape_time" in notes[0].message


def test_analyze_reads_net_samples_from_a_run_directory_and_skips_cut_off_lines(tmp_path: Path) -> None:
    # GIVEN a run directory holding only one host's interface samples, the last line cut off by a crash
    run = tmp_path / "run"
    (run / "counters").mkdir(parents=True)
    lines = [json.dumps({"ts_ns": T0 + i * 10**9, "host": "node-b",
                         "ifaces": {"eth0": {"operstate": "up", "carrier": 1, "counters": {"tx_bytes": i * 100}}}})
             for i in range(3)]
    (run / "counters" / "node-b.net.jsonl").write_text("\n".join(lines) + '\n{"ts_ns": 17960')
    # WHEN loaded
    store = load_path(run, LoadOptions(workers=1, cache_dir=None))
    # THEN its rows are in the netdev table, and the cut-off line is one note naming the file
    assert sorted(store["netdev"]["ts_ns"].unique().tolist()) == [T0, T0 + 10**9, T0 + 2 * 10**9]
    assert list(store["net_ifaces"]["iface"]) == ["eth0"]
    assert [n.source for n in store.notes if "interface samples" in n.message] == [
        str(run / "counters" / "node-b.net.jsonl")]
