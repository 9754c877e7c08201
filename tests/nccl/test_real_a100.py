"""The 2x A100 NVLink host of issue 38 on a real public log (trimagiccube/my_nccl, NCCL 2.23.4; PROVENANCE.md).

The real log is the normal case: 12 NVLinks at NCCL's 20 GB/s each (NVL paths at 240 GB/s), 24 channels, P2P/CUMEM,
one node, GPUDirect RDMA disabled for its only (unused) NIC. The fault case (NCCL_TOPO_FILE with `<nvlink count="1">`)
is derived from that real log by the edits NCCL's own code makes for count="1" (graph/topo.cc: NVLink bandwidth =
count x SM80_NVLINK_BW = 20.0 GB/s, printed `%.1f` in paths.cc and the system tree; search.cc then finds 1 channel
per pattern, 2 coll channels); the nccl-tests tables of both (217 and 28.6 GB/s) are the issue's figures, rebuilt.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import Severity
from perftracker.analyzers.nccl.config import analyze_nccl_config, flags
from perftracker.analyzers.nccl.context import build_context
from perftracker.analyzers.nccl.expected_bw import expect, link_gbs, topology_of
from perftracker.collectors.nccl.log import load_nccl_logs
from perftracker.collectors.nccl.nccl_tests import load_nccl_tests
from perftracker.store import Store

PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_public"
TRACE = PUBLIC / "my_nccl_a100_2proc_trace_all.log"
INFO = PUBLIC / "my_nccl_a100_2proc_run_info.log"
GPU = "NVIDIA A100-SXM4-40GB"  # PCI device 0x20b0 in the job's topology dump

_TABLE = """# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid 1622686 on   aig-a100 device  0 [0x08] {gpu}
#  Rank  1 Group  0 Pid 1622687 on   aig-a100 device  1 [0x09] {gpu}
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1  {t:7.1f}  {bw:6.2f}  {bw:6.2f}      0  {t:7.1f}  {bw:6.2f}  {bw:6.2f}      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {bw:.3f}
"""


def _table(busbw: float) -> str:
    return _TABLE.format(gpu=GPU, t=1073741824 / (busbw * 1e3), bw=busbw)


def _store(*paths: Path) -> Store:
    frames, _ = load_nccl_logs(list(paths))
    tests, _ = load_nccl_tests(list(paths))
    return Store(tables={**frames, **tests})


def _count_one(text: str) -> str:
    """The real log as NCCL would print it with NCCL_TOPO_FILE naming a topology with `<nvlink count="1">`."""
    text = text.replace("NVL[240.0]", "NVL[20.0]").replace("(1/240.0/NVL)", "(1/20.0/NVL)")
    text = text.replace("maxBw 240.0 totalBw 240.0", "maxBw 20.0 totalBw 24.0")
    text = re.sub(r"nChannels 12, bw (\d+)\.000000/\d+\.000000", "nChannels 1, bw 20.000000/20.000000", text)
    text = text.replace("24 coll channels, 24 collnet channels", "2 coll channels, 2 collnet channels")
    text = re.sub(r"(?m)^.* NCCL INFO (Channel (0[2-9]|1\d|2[0-3])/|Ring (0[2-9]|1\d|2[0-3]) :).*\n", "", text)
    text = text.replace("Channel 00/24", "Channel 00/02").replace("Channel 01/24", "Channel 01/02")
    return re.sub(r"(?m)^(aig-a100:\d+:\d+ \[\d\] NCCL INFO )(ncclCommInitRank .* Init START)$",
                  r"\1\2\n\1NCCL_TOPO_FILE set by environment to /home/user/one_nvlink.xml", text)


def test_real_a100_topology_is_read() -> None:
    # GIVEN the real TRACE log of a 2-process all_reduce on the 2x A100 NVLink host (NCCL 2.23.4)
    frames, _ = load_nccl_logs([TRACE])
    ctx = build_context(Store(tables=frames))
    # WHEN its topology is read
    topo = topology_of(ctx)
    # THEN the GPU-GPU NVLink is 240 GB/s everywhere: 12 links of A100's 20 GB/s, as the job's topology dump says
    assert set(topo.nvl_gbs) == {240.0}
    per_link = link_gbs("nvlink", gpu=GPU, links=1)
    assert per_link == 20.0 and 240.0 / per_link == 12
    dump = ET.parse(PUBLIC / "my_nccl_aig-a100-topo.xml")
    assert {n.get("count") for n in dump.iter("nvlink")} == {"12"}
    # AND 24 channels, P2P the only transport, one node, NCCL 2.23.4
    assert topo.channels == 24 and topo.transports == {"P2P"} and not topo.multi_node
    assert ctx.version() == (2, 23, 4)
    # AND with the GPU named, the expectation sees all 12 links and 24 channels of the hardware
    exp = expect(topology_of(ctx, (GPU,)))
    assert exp is not None and (exp.nvl_links_seen, exp.nvl_links_hw, exp.channels_hw) == (12.0, 12, 24)


def test_real_normal_logs_get_no_warning(tmp_path: Path) -> None:
    # GIVEN the real INFO and TRACE logs of the host, and the TRACE log with the normal table (217 GB/s)
    job = tmp_path / "normal.log"
    job.write_text(TRACE.read_text() + _table(217.0))
    for store in (_store(INFO), _store(TRACE), _store(job)):
        # WHEN judged
        findings = analyze_nccl_config(Analysis(store))
        # THEN nothing above info; the GDR-disabled line of this single-node P2P job is context only
        assert [f.title for f in findings if f.severity > Severity.INFO] == []
    gdr = [f for f in analyze_nccl_config(Analysis(_store(TRACE))) if "gdr_disabled" in flags([f])]
    assert len(gdr) == 1 and gdr[0].severity == Severity.INFO and "bnxt_re0" in str(gdr[0].evidence)


def test_count_one_topology_derived_from_the_real_log(tmp_path: Path) -> None:
    # GIVEN the real log with NCCL's count="1" edits (20 GB/s NVLink, 2 channels, NCCL_TOPO_FILE) and 28.6 GB/s
    job = tmp_path / "fault.log"
    job.write_text(_count_one(TRACE.read_text()) + _table(28.6))
    # WHEN judged
    findings = analyze_nccl_config(Analysis(_store(job)))
    # THEN one warning or critical names the forced topology (1 NVLink of 12, 2 channels of 24) and the ~6.7x gap
    gap = [f for f in findings if f.severity >= Severity.WARNING]
    assert len(gap) == 1, [f.title for f in findings]
    f = gap[0]
    assert f.evidence["flag"] == "forced_topology" and "/home/user/one_nvlink.xml" in f.title
    assert "1 NVLink of 12" in f.title and "2 channels of 24" in f.title
    assert 6.0 <= f.evidence["gap_x"] <= 7.5
