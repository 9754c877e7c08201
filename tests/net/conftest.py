"""A fake node for network-counter tests: a /sys/class/net tree and a /proc/net whose counters can be moved."""

from __future__ import annotations

from pathlib import Path

STATS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped",
         "rx_crc_errors")
SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 10 10 0 1 4 {in_segs} {out_segs} {retrans} 0 2 0
"""
NETSTAT = """TcpExt: SyncookiesSent TCPTimeouts TCPLostRetransmit
TcpExt: 0 {timeouts} 0
"""


class FakeNetNode:
    """`root/sys/class/net/<iface>/...` and `root/proc/net/{snmp,netstat,route}` of one node."""

    def __init__(self, root: Path, ifaces: tuple[str, ...] = ("lo", "eth0"), speed: int = 10000) -> None:
        self.sys = root / "sys"
        self.proc = root / "proc"
        (self.proc / "net").mkdir(parents=True, exist_ok=True)
        for name in ifaces:
            self.set(name, operstate="unknown" if name == "lo" else "up", carrier=1, flags="0x1003",
                     speed=speed if name != "lo" else -1, mtu=1500, carrier_changes=2, carrier_up_count=1,
                     carrier_down_count=1, **{s: 0 for s in STATS})
        self.tcp(0, 0, 0, 0)
        (self.proc / "net" / "route").write_text(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
            "eth0\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")

    def set(self, iface: str, **values: object) -> None:
        base = self.sys / "class" / "net" / iface
        (base / "statistics").mkdir(parents=True, exist_ok=True)
        for name, value in values.items():
            target = base / "statistics" / name if name in STATS else base / name
            target.write_text(f"{value}\n")

    def tcp(self, in_segs: int, out_segs: int, retrans: int, timeouts: int) -> None:
        (self.proc / "net" / "snmp").write_text(SNMP.format(in_segs=in_segs, out_segs=out_segs, retrans=retrans))
        (self.proc / "net" / "netstat").write_text(NETSTAT.format(timeouts=timeouts))
