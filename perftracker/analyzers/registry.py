"""The analyzer registry: the explicit list of analyzers `analyze` runs, and the safe way to run them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.efficiency.analyzer import analyze_efficiency
from perftracker.analyzers.failures.crash import analyze_crash
from perftracker.analyzers.failures.hang import analyze_hang
from perftracker.analyzers.failures.silent_host import analyze_silent_host
from perftracker.analyzers.findings import Finding, failure_finding
from perftracker.analyzers.health.bandwidth import analyze_bandwidth
from perftracker.analyzers.health.gpu_health import analyze_gpu_health
from perftracker.analyzers.health.gpu_links import analyze_gpu_links
from perftracker.analyzers.health.links import analyze_links
from perftracker.analyzers.health.rdma import analyze_rdma
from perftracker.analyzers.health.rdma_pfc import analyze_rdma_pfc
from perftracker.analyzers.health.topology import analyze_topology
from perftracker.analyzers.inputs import analyze_inputs
from perftracker.analyzers.nccl.collective_bandwidth import analyze_inspector_bandwidth
from perftracker.analyzers.nccl.collective_timing import analyze_inspector_stragglers
from perftracker.analyzers.nccl.config import analyze_nccl_config
from perftracker.analyzers.online.baseline_shift import analyze_baseline_shift
from perftracker.analyzers.online.cpu_contention import analyze_cpu_contention
from perftracker.analyzers.online.waited_rank import analyze_waited_rank
from perftracker.analyzers.pipeline.analyzer import analyze_pipeline
from perftracker.analyzers.stragglers.degradation import analyze_degradation
from perftracker.analyzers.stragglers.expert_balance import analyze_expert_balance
from perftracker.analyzers.stragglers.stack_profile import analyze_stack_profile
from perftracker.analyzers.stragglers.steps import analyze_steps
from perftracker.analyzers.stragglers.straggler import analyze_stragglers
from perftracker.analyzers.traces.breakdown import analyze_breakdown
from perftracker.analyzers.traces.idle import analyze_idle
from perftracker.analyzers.traces.overlap import analyze_overlap
from perftracker.analyzers.whatif.analyzer import analyze_whatif

AnalyzerFn = Callable[[Analysis], list[Finding]]


@dataclass(frozen=True)
class Analyzer:
    name: str
    fn: AnalyzerFn
    description: str


BUILTIN: tuple[Analyzer, ...] = (
    Analyzer("topology", analyze_topology, "Rank to GPU / NUMA node / NIC map for tying host evidence to ranks"),
    Analyzer("bandwidth", analyze_bandwidth, "Achieved algorithm / bus bandwidth per collective vs the NIC link rate"),
    Analyzer("breakdown", analyze_breakdown, "Temporal breakdown of GPU time per rank"),
    Analyzer("baseline_shift", analyze_baseline_shift,
             "An incident of --watch: the rank whose time moved to other frames since the healthy baseline"),
    Analyzer("cpu_contention", analyze_cpu_contention,
             "An incident of --watch: ranks that waited for a CPU (other processes on the host) more than in the "
             "healthy baseline"),
    Analyzer("waited_rank", analyze_waited_rank,
             "An incident of --watch: the rank the others wait for, from each rank's sampled scheduler state "
             "(stopped, running or runnable while the others sleep in the collective)"),
    Analyzer("crash", analyze_crash,
             "Hangs and crashes from flight-recorder dumps, watchdog/gloo timeouts, tracebacks and Xid lines"),
    Analyzer("degradation", analyze_degradation, "Step time over the run: periodic slow steps and sustained slowdowns"),
    Analyzer("gpu_health", analyze_gpu_health,
             "GPU health: throttling, low clocks, XID/ECC, PCIe link, utilization vs peers"),
    Analyzer("gpu_links", analyze_gpu_links, "GPU links: NVLink errors / recoveries / links down, PCIe replays"),
    Analyzer("hang", analyze_hang, "Hung jobs: the ranks not in the collective the others wait in (py-spy stacks)"),
    Analyzer("idle", analyze_idle, "GPU idle gaps: launch-bound, synchronization, between steps, dependencies"),
    Analyzer("inputs", analyze_inputs, "What was loaded, what was lost, and what is missing"),
    Analyzer("links", analyze_links,
             "Ethernet links per host: flaps, errors and drops, links held below what the job asks, joined to its "
             "stalls"),
    Analyzer("nccl_bandwidth", analyze_inspector_bandwidth,
             "NCCL Inspector: a communicator's collectives slowing over time, or slower than its peers"),
    Analyzer("nccl_straggler", analyze_inspector_stragglers,
             "NCCL Inspector: the rank the others wait for at collectives, from per-rank kernel times"),
    Analyzer("nccl_config", analyze_nccl_config,
             "NCCL configuration and NCCL log problems (transport, NICs, GIDs, env values)"),
    Analyzer("overlap", analyze_overlap, "Communication hidden under compute, and exposed communication per step"),
    Analyzer("rdma", analyze_rdma, "RDMA ports: throughput vs link rate, idle rails, congestion, errors, link state"),
    Analyzer("rdma_pfc", analyze_rdma_pfc,
             "RoCE flow control from ethtool counters: PFC pauses received / sent, pause storms, NIC drops"),
    Analyzer("silent_host", analyze_silent_host,
             "A node that died: it went silent while the other nodes' ranks failed with lost-connection errors"),
    Analyzer("stack_profile", analyze_stack_profile,
             "Stragglers from sampled stacks: the rank whose time goes somewhere the others' does not"),
    Analyzer("steps", analyze_steps, "Step time per rank: spread across ranks, unstable steps, slow phases"),
    Analyzer("pipeline", analyze_pipeline,
             "Pipeline-parallel jobs: the schedule and its bubbles, stage imbalance (what to move, the step a "
             "balanced split gives), bubbles beyond the schedule's ideal"),
    Analyzer("straggler", analyze_stragglers, "Cross-rank stragglers at collectives: who, how late, what it costs"),
    Analyzer("whatif", analyze_whatif,
             "Pipeline jobs recorded per operation (OSDI'25 format): what-if replay on the real dependencies, "
             "slowdown S, S_t, S_w, M_W, M_S and the verdict (one worker, the last stage, random variation)"),
    Analyzer("expert_balance", analyze_expert_balance,
             "Expert parallelism: a few ranks receiving most all-to-all tokens, and the wait it causes"),
    Analyzer("efficiency", analyze_efficiency,
             "Compute efficiency from op shapes: misaligned or tiny GEMMs, FP32 GEMMs, unfused attention, "
             "fusible elementwise chains"),
)


def _plugins() -> list[Analyzer]:
    found: list[Analyzer] = []
    builtin = {a.name for a in BUILTIN}
    for entry in metadata.entry_points(group="perftracker.analyzers"):
        try:
            fn = entry.load()
        except Exception as exc:  # a broken plugin must not stop the run
            found.append(Analyzer(f"plugin:{entry.name}",
                                  _failing(f"could not import plugin {entry.value}: {exc}"), "broken plugin"))
            continue
        if entry.name not in builtin:
            found.append(Analyzer(entry.name, fn, (fn.__doc__ or entry.name).strip()))
    return found


def _failing(message: str) -> AnalyzerFn:
    def fail(analysis: Analysis) -> list[Finding]:
        raise RuntimeError(message)

    return fail


def run_analyzers(analysis: Analysis, only: list[str] | None = None,
                  extra: tuple[Analyzer, ...] = ()) -> list[Finding]:
    """Run each analyzer; an exception becomes a warning finding naming the analyzer (its role: context). The
    findings are each analyzer's own: relating them to each other is `passes.apply_passes`'."""
    findings: list[Finding] = []
    for analyzer in [*BUILTIN, *extra, *_plugins()]:  # the built-in ones, then `extra`, then plugins
        if only and analyzer.name not in only:
            continue
        try:
            with analysis.active():  # the run's thresholds (overrides), for every rule the analyzer applies
                findings.extend(analyzer.fn(analysis))
        except Exception as exc:
            findings.append(failure_finding(
                analyzer.name, f"Analyzer '{analyzer.name}' failed: {type(exc).__name__}: {exc}",
                "This is a perftracker bug; please report it with the traceback in the evidence. The other "
                "analyzers ran normally.", key=f"crash:{analyzer.name}"))
    return findings
