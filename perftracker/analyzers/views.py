"""The report's views: the named tables reports draw, each computed once per analysis by the analyzers' rooms.

`REPORT_VIEWS` is the explicit list, name -> view function (`fn(analysis) -> DataFrame`, defined next to the
computation it shows).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.compare.summaries import op_totals_view, settings_view
from perftracker.analyzers.coverage import run_summary_view
from perftracker.analyzers.efficiency.tables import device_peaks_view, op_efficiency_view, step_mfu_view
from perftracker.analyzers.failures.waitview import wait_graph_view
from perftracker.analyzers.health.tables import (
    gpu_series_table,
    gpu_throttle_table,
    pfc_paused_table,
    rdma_congestion_table,
    rdma_ports_table,
    rdma_throughput_table,
)
from perftracker.analyzers.nccl.collective_bandwidth import inspector_bandwidth_view
from perftracker.analyzers.nccl.collective_timing import inspector_lateness_view
from perftracker.analyzers.nccl.tables import (
    nccl_busbw_table,
    nccl_config_table,
    nccl_flagged_table,
    nccl_summary_table,
    nccl_transports_table,
    nccl_warns_table,
)
from perftracker.analyzers.pipeline.views import layout_grid_view
from perftracker.analyzers.ranks.focus import lateness_groups_view, rank_focus_view, step_spread_view
from perftracker.analyzers.ranks.groups import rank_groups_view, rank_layout_view
from perftracker.analyzers.stepgraph.critical_path import critical_path_ops_view
from perftracker.analyzers.stepgraph.replay_costs import (
    critical_path_view,
    replay_steps_view,
    whatif_ranks_view,
)
from perftracker.analyzers.stragglers.expert_balance import alltoall_bytes_view
from perftracker.analyzers.stragglers.stack_profile import profile_ranks_view, profile_shares_view
from perftracker.analyzers.stragglers.steps import step_series_view, step_stats_view
from perftracker.analyzers.stragglers.straggler import lateness_view, rank_waits_view
from perftracker.analyzers.stragglers.wait_transfer import collective_split_view, step_waits_view
from perftracker.analyzers.traces.gap_ops import idle_ops_view, longest_gaps_view
from perftracker.analyzers.traces.gpu_time import breakdown_steps_view, breakdown_view
from perftracker.analyzers.traces.idle import idle_view
from perftracker.analyzers.traces.kernels import (
    kernel_families_view,
    kernels_per_rank_view,
    kernels_view,
    ops_per_rank_view,
    ops_view,
)
from perftracker.analyzers.traces.merged_timeline import timeline_view
from perftracker.analyzers.whatif.analyzer import whatif_optypes_view, whatif_workers_view

TableView = Callable[[Analysis], pd.DataFrame]

REPORT_VIEWS: dict[str, TableView] = {
    # the summary strip at the top: ranks, hosts, step time and its spread across ranks
    "run_summary": run_summary_view,
    # a hung or failed job: who waits for whom across process groups, and the root each wait leads to
    "wait_graph": wait_graph_view,
    # many ranks (more than 64): how they are grouped (by host where known), the ranks worth showing
    # (the slowest, the slowest one's peers, the median), spreads across ranks binned by group and by step
    "rank_layout": rank_layout_view,
    "rank_groups": rank_groups_view,
    "rank_focus": rank_focus_view,
    "lateness_groups": lateness_groups_view,
    "step_spread": step_spread_view,
    # GPU traces: where GPU time goes, per rank window and per step; one representative step; idle time
    "breakdown": breakdown_view,
    "breakdown_steps": breakdown_steps_view,
    "timeline": timeline_view,
    "idle": idle_view,
    # the top GPU kernels and CPU ops (across ranks and per rank), kernel families, what the CPU ran while the GPU idled
    "kernels": kernels_view,
    "kernels_per_rank": kernels_per_rank_view,
    "kernel_families": kernel_families_view,
    "ops": ops_view,
    "ops_per_rank": ops_per_rank_view,
    "idle_ops": idle_ops_view,
    "idle_longest": longest_gaps_view,
    # step times and stragglers at collectives
    "step_stats": step_stats_view,
    "steps": step_series_view,
    "lateness": lateness_view,
    "rank_waits": rank_waits_view,
    # pipeline jobs: the DP x PP grid of workers, each one's busy and waiting time per step
    "layout_grid": layout_grid_view,
    # who waits for whom: per (matched collective, rank) arrival, wait, transfer, bandwidth; per (step, rank)
    "collective_waits": collective_split_view,
    "step_waits": step_waits_view,
    # expert parallelism: rows and bytes each rank sent each other over the matched all-to-alls
    "alltoall_bytes": alltoall_bytes_view,
    # the cross-rank critical path's bound classes per (step, rank), the what-if replay's fit per step
    "critical_path": critical_path_view,
    # the same at op level: each rank's step time and the cross-rank path by launches, streams and host syncs
    "critical_path_ops": critical_path_ops_view,
    "replay_steps": replay_steps_view,
    # per rank doing more than its peers (traces): the step time saved if it were fixed, and OSDI'25's S_w
    "whatif_ranks": whatif_ranks_view,
    # pipeline jobs recorded per operation: the what-if's S_w per worker and S_t per op type (OSDI'25)
    "whatif_workers": whatif_workers_view,
    "whatif_optypes": whatif_optypes_view,
    # host health: GPU samples and throttle periods, RDMA ports, RoCE flow control
    "gpu_series": gpu_series_table,
    "gpu_throttle": gpu_throttle_table,
    "rdma_ports": rdma_ports_table,
    "rdma_throughput": rdma_throughput_table,
    "rdma_congestion": rdma_congestion_table,
    "pfc_paused": pfc_paused_table,
    # NCCL configuration, transports, WARN lines and the variables the findings are about
    "nccl_summary": nccl_summary_table,
    "nccl_config": nccl_config_table,
    "nccl_flagged": nccl_flagged_table,
    "nccl_transports": nccl_transports_table,
    "nccl_warns": nccl_warns_table,
    "nccl_busbw": nccl_busbw_table,
    # NCCL Inspector: per-rank lateness at each communicator's collectives, bandwidth per communicator and size
    "inspector_lateness": inspector_lateness_view,
    "inspector_bandwidth": inspector_bandwidth_view,
    # sampled stacks side by side
    "profile_ranks": profile_ranks_view,
    "profile_shares": profile_shares_view,
    # what a later `perftracker diff` compares: op time per rank, captured settings
    "op_totals": op_totals_view,
    "settings": settings_view,
    # compute efficiency from op shapes: per (op, shape, dtype) FLOPs, bytes, achieved rates against the roofline
    # (and the GPU time no model covers), MFU per rank and step, the devices' peaks the roofline chart draws
    "op_efficiency": op_efficiency_view,
    "step_mfu": step_mfu_view,
    "device_peaks": device_peaks_view,
}


def report_tables(analysis: Analysis, failed: dict[str, Exception] | None = None) -> dict[str, pd.DataFrame]:
    """Every report view of `analysis`, by name (in REPORT_VIEWS order). A view that raises raises here, unless
    `failed` is given: then its table is empty and its error is put in `failed` under its name."""
    tables: dict[str, pd.DataFrame] = {}
    for name, fn in REPORT_VIEWS.items():
        try:
            tables[name] = analysis.view(fn)
        except Exception as exc:
            if failed is None:
                raise
            tables[name] = pd.DataFrame()
            failed[name] = exc
    return tables
