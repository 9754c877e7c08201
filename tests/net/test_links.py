"""The `links` analyzer on small recorded-format inputs: a flap named with its host, interface, time and the
stall it caused; the hosts that only saw it; drops and errors; a rate finding only with evidence of waiting."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Finding, Severity
from perftracker.analyzers.health.links import analyze_links
from perftracker.collectors.loading import LoadOptions, load_path

T0 = 1_796_000_000_000_000_000
S = 10**9
HOSTS = {"node-a": (0, 1), "node-b": (2, 3)}

State = Callable[[str, float], dict[str, Any]]  # (host, t seconds) -> iface fields to override


def _up(host: str, t: float) -> dict[str, Any]:
    return {}


def _sample(host: str, t: float, mbit: float, extra: dict[str, Any], qdisc: dict[str, Any] | None) -> dict[str, Any]:
    iface: dict[str, Any] = {"operstate": "up", "carrier": 1, "admin_up": True, "speed_mbps": 10000,
                             "counters": {"tx_bytes": int(t * mbit * 1e6 / 8), "rx_bytes": int(t * mbit * 1e6 / 8),
                                          "tx_packets": int(t * 1000), "rx_packets": int(t * 1000),
                                          "carrier_changes": 2, "rx_crc_errors": 0, "rx_dropped": 0},
                             "why": "GLOO_SOCKET_IFNAME=eth0", "addresses": [f"10.0.0.{1 + list(HOSTS).index(host)}"]}
    counters = extra.pop("counters", {})
    iface.update(extra)
    iface["counters"].update(counters)
    if qdisc is not None:
        iface["qdisc"] = qdisc(t) if callable(qdisc) else qdisc
    return {"ts_ns": T0 + int(t * S), "host": host, "ifaces": {"eth0": iface},
            "tcp": {"RetransSegs": 0, "TCPTimeouts": 0}}


def make_run(tmp: Path, seconds: int = 20, state: State = _up, stall: tuple[int, float] | None = None,
             mbit: float = 80.0, qdisc: Any = None, tcp: Callable[[str, float], dict[str, int]] | None = None,
             changes: list[tuple[str, float, dict[str, Any]]] = ()) -> Path:  # type: ignore[assignment]
    """A run directory: both hosts' eth0 sampled every second for `seconds`, 100 ms steps of every rank, step
    `stall[0]` lasting `stall[1]` s longer; `state` overrides fields of a sample; `changes` adds watcher records."""
    run = tmp / "run"
    (run / "counters").mkdir(parents=True)
    (run / "steps").mkdir()
    for host, ranks in HOSTS.items():
        lines = []
        for i in range(seconds + 1):
            rec = _sample(host, float(i), mbit, dict(state(host, float(i))), qdisc if host == "node-b" else None)
            if tcp is not None:
                rec["tcp"] = tcp(host, float(i))
            lines.append(rec)
        for who, t, fields in changes:
            if who == host:
                lines.append({"ts_ns": T0 + int(t * S), "host": host, "changed_within_s": 0.1,
                              "ifaces": {"eth0": fields}})
        lines.sort(key=lambda r: r["ts_ns"])
        (run / "counters" / f"{host}.net.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        for rank in ranks:
            t, out = T0 + S, []
            for step in range(int((seconds - 2) / 0.1)):
                dur = int(0.1 * S) + (int(stall[1] * S) if stall and step == stall[0] else 0) + rank * 1000
                out.append({"rank": rank, "step": step, "start_ns": t, "end_ns": t + dur, "host": host,
                            "phases_ns": {"forward": dur // 4, "backward": dur // 2, "optimizer": dur // 4}})
                t += dur
                if t > T0 + (seconds - 1) * S:
                    break
            (run / "steps" / f"rank-{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return run


def links(run: Path) -> list[Finding]:
    return analyze_links(Analysis(load_path(run, LoadOptions(workers=1, cache_dir=None))))


def warnings(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity >= Severity.WARNING]


def test_a_link_taken_down_is_named_with_its_host_time_length_and_the_stall_it_caused(tmp_path: Path) -> None:
    # GIVEN node-b's eth0 taken down from t=8.3 s to t=11.3 s (the watcher saw both changes), and every rank's
    # step 70 (t ~8 s) lasting 3.2 s longer; node-a's TCP timed out meanwhile
    def down(host: str, t: float) -> dict[str, Any]:
        if host == "node-b" and 8.3 < t < 11.3:
            return {"operstate": "down", "carrier": 0, "admin_up": False, "counters": {"carrier_changes": 3}}
        return {"counters": {"carrier_changes": 4}} if host == "node-b" and t >= 11.3 else {}

    def tcp(host: str, t: float) -> dict[str, int]:
        return {"RetransSegs": 7 if host == "node-a" and t >= 10 else 0, "TCPTimeouts": 2 if host == "node-a" and t >= 10 else 0}

    run = make_run(tmp_path, state=down, stall=(70, 3.2), tcp=tcp, changes=[
        ("node-b", 8.3, {"operstate": "down", "carrier": 0, "admin_up": False}),
        ("node-b", 11.3, {"operstate": "up", "carrier": 1, "admin_up": True})])
    # WHEN analyzed
    found = warnings(links(run))
    # THEN one critical finding names node-b's eth0, when and how long it was down, and the stall
    assert len(found) == 1, [f.title for f in found]
    flap = found[0]
    assert flap.severity == Severity.CRITICAL and flap.hosts == ("node-b",)
    assert flap.title.startswith("node-b's link eth0 went down for 3.0 s at ")
    assert flap.title.endswith("every rank stalled 3.2 s in 'backward' at step 70")
    down_ev = flap.evidence["downs"][0]
    assert abs(down_ev["start_ns"] - (T0 + int(8.3 * S))) < 0.1 * S and down_ev["taken_down"] is True
    assert down_ev["stall"]["ranks"] == [0, 1, 2, 3]
    # AND node-a is among those that only saw it, with what it saw; the cost is the stall spread over the steps
    assert flap.evidence["also_saw"] == [{"host": "node-a", "tcp_retransmits": 7, "tcp_timeouts": 2}]
    assert flap.cost.seconds_per_step > 0 and flap.ranks == (0, 1, 2, 3)


def test_a_watcher_record_written_after_a_regular_sample_of_the_change_still_times_it(tmp_path: Path) -> None:
    # GIVEN node-b's eth0 taken down at t=8.95 s and up at t=11.95 s, where (as in a real 3-node lab run under load)
    # the regular sample at t=9 s already shows it down and the watcher's record of the change, "within 0.1 s",
    # is written 10 ms after that sample; likewise for the way back up
    def down(host: str, t: float) -> dict[str, Any]:
        if host == "node-b" and 8.95 < t < 11.95:
            return {"operstate": "down", "carrier": 0, "admin_up": False, "counters": {"carrier_changes": 3}}
        return {"counters": {"carrier_changes": 4}} if host == "node-b" and t >= 11.95 else {}

    run = make_run(tmp_path, state=down, stall=(70, 3.2), changes=[
        ("node-b", 9.01, {"operstate": "down", "carrier": 0, "admin_up": False}),
        ("node-b", 12.01, {"operstate": "up", "carrier": 1, "admin_up": True})])
    # WHEN analyzed
    found = warnings(links(run))
    # THEN the down period is timed by the watcher's window, not midway between the regular samples (8.5 s, 11.5 s)
    (down_ev,) = found[0].evidence["downs"]
    assert abs(down_ev["start_ns"] - (T0 + int(8.95 * S))) < 0.1 * S, (down_ev["start_ns"] - T0) / S
    assert abs(down_ev["end_ns"] - (T0 + int(11.95 * S))) < 0.1 * S, (down_ev["end_ns"] - T0) / S
    earliest, latest = down_ev["start_between_ns"]  # the watcher's window, closed by the regular sample
    assert abs(earliest - (T0 + int(8.91 * S))) < 1000 and latest == T0 + 9 * S


def test_a_peer_that_only_lost_its_carrier_meanwhile_is_not_blamed(tmp_path: Path) -> None:
    # GIVEN node-b's eth0 taken down, and node-a's eth0 (a direct cable to it) losing its carrier meanwhile
    def down(host: str, t: float) -> dict[str, Any]:
        if 5 <= t <= 7:
            return {"operstate": "down", "carrier": 0, "admin_up": host != "node-b"}
        return {}

    # WHEN analyzed
    found = warnings(links(make_run(tmp_path, state=down)))
    # THEN only node-b is named; node-a is listed as having lost its carrier because of it
    assert [f.hosts for f in found] == [("node-b",)]
    assert {"host": "node-a", "carrier_lost_on": "eth0"} in found[0].evidence["also_saw"]
    # AND with no stall in the job's steps it is a warning saying so
    assert found[0].severity == Severity.WARNING and "show no stall" in found[0].title


def test_a_flap_shorter_than_the_sampling_interval_is_seen_from_the_carrier_changes(tmp_path: Path) -> None:
    # GIVEN node-a's eth0 up in every sample, but its carrier changed twice between t=6 and t=7
    def bounce(host: str, t: float) -> dict[str, Any]:
        return {"counters": {"carrier_changes": 4}} if host == "node-a" and t >= 7 else {}

    found = warnings(links(make_run(tmp_path, state=bounce)))
    # THEN it is named, as shorter than the sampling interval
    assert [f.hosts for f in found] == [("node-a",)] and "shorter than the sampling interval" in found[0].title


def test_a_clean_job_gives_context_only(tmp_path: Path) -> None:
    # GIVEN two hosts whose links stay up and carry 80 Mbit/s without errors, drops or a shaper
    found = links(make_run(tmp_path))
    # THEN there is one info finding with each host's job interface and why it was chosen, nothing more
    assert [f.severity for f in found] == [Severity.INFO]
    assert "node-a eth0 (GLOO_SOCKET_IFNAME=eth0)" in found[0].title and "node-b eth0" in found[0].title


def test_a_shaper_holding_packets_back_is_a_rate_finding_and_a_slow_idle_link_is_not(tmp_path: Path) -> None:
    # GIVEN node-b's egress under a 20 Mbit/s tbf that holds back 500 packets a second
    def held(t: float) -> dict[str, Any]:
        return {"kind": "tbf", "rate_bps": 20_000_000, "overlimits": int(500 * t), "drops": 0, "backlog_bytes": 0}

    found = warnings(links(make_run(tmp_path / "held", mbit=19.0, qdisc=held)))
    # THEN node-b's link is named as held to its shaper's rate
    assert [f.hosts for f in found] == [("node-b",)]
    assert found[0].title.startswith("node-b's link eth0 is held to 20 Mbit/s by its egress shaper (500 packets")
    # BUT the same shaper holding nothing back (a lightly used link) is no finding
    idle = {"kind": "tbf", "rate_bps": 20_000_000, "overlimits": 0, "drops": 0, "backlog_bytes": 0}
    assert warnings(links(make_run(tmp_path / "idle", mbit=1.0, qdisc=idle))) == []


def test_errors_and_drops_beyond_their_thresholds_are_named(tmp_path: Path) -> None:
    # GIVEN node-a's eth0 with a CRC error every 2 s and 2% of its received packets dropped
    def lossy(host: str, t: float) -> dict[str, Any]:
        return {"counters": {"rx_crc_errors": int(t / 2), "rx_dropped": int(t * 20)}} if host == "node-a" else {}

    found = warnings(links(make_run(tmp_path, state=lossy)))
    # THEN one warning names node-a's eth0 with both rates
    assert [f.hosts for f in found] == [("node-a",)]
    assert "rx_crc_errors 0.50/s" in found[0].title and "rx_dropped 20.0/s (2.00% of packets)" in found[0].title
