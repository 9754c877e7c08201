"""Turn what the loaders noticed about their inputs into findings users see in the report."""

from __future__ import annotations

from perftracker.analyzers.analysis import Analysis
from perftracker.analyzers.findings import NO_ACTION, Finding, Kind, Severity
from perftracker.analyzers.traces.exec_trace import execution_trace_findings
from perftracker.errors import sentence_start
from perftracker.evidence.traces import InputsEvidence
from perftracker.store import Store

# CUDA / HIP calls that queue GPU work (kernels, graphs)
_LAUNCH_CALL = r"^(?:cuda|hip|cu)(?:LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel|GraphLaunch)|^hipExtModuleLaunchKernel"


def analyze_inputs(analysis: Analysis) -> list[Finding]:
    store = analysis.store
    findings: list[Finding] = []
    errors = [n for n in store.notes if n.level == "error"]
    if errors:
        findings.append(Finding(
            Kind.INPUTS, Severity.WARNING, f"{len(errors)} input file(s) could not be used; results cover the rest",
            "Re-export or re-copy the files listed in the evidence; the other ranks were analyzed.",
            InputsEvidence(files={n.source: n.message for n in errors[:50]}), key="inputs:errors"))
    partial = [n for n in store.notes if n.level == "warning"]
    if partial:
        findings.append(Finding(
            Kind.INPUTS, Severity.WARNING, f"{len(partial)} input(s) were only partly usable (cut off or malformed)",
            "The job was probably killed while writing. Results use the recovered part; profile again with a "
            "clean exit (prof.stop() / leaving the profiler context) for full data.",
            InputsEvidence(notes=[f"{n.source}: {n.message}" for n in partial[:50]]), key="inputs:partial"))
    for note in store.notes:
        if note.level == "info":
            findings.append(Finding(Kind.INPUTS, Severity.INFO, sentence_start(note.message), NO_ACTION,
                                    dict(note.data), key=f"inputs:{note.message}"))
    if store.n_events and not store.event_columns(["stream"])["stream"].ge(0).any():
        findings.append(_no_gpu_activity(store))
    findings.extend(execution_trace_findings(analysis))
    findings.extend(_synthetic(store))
    return findings


def _no_gpu_activity(store: Store) -> Finding:
    """Why the traces have no GPU events, from what they do hold: kernel launches, CUPTI counter ranges."""
    ev = store.event_columns(["kind", "name"])
    runtime = ev[ev["kind"] == "runtime"]
    launches = int(runtime["name"].astype(str).str.contains(_LAUNCH_CALL, regex=True).sum())
    ranges = int((ev["kind"] == "counter_range").sum())
    skipped = "GPU breakdown, overlap and idle analyses were skipped. "
    if launches and ranges:
        return Finding(
            Kind.INPUTS, Severity.WARNING, f"The traces hold {launches} kernel launches but no kernel events: CUPTI "
            f"range profiling ({ranges} counter ranges, cuda_profiler_range) replaced kernel tracing",
            skipped + "ProfilerActivity.CUDA was on (the CUDA runtime calls are traced); the profile was taken with "
            "hardware counters (torch.profiler's experimental_config=_ExperimentalConfig(profiler_metrics=[...])), "
            "which serializes kernels and records counter ranges instead of a kernel timeline. Profile again "
            "without profiler_metrics for the timeline; keep counter runs apart.",
            InputsEvidence(kernel_launches=launches, counter_ranges=ranges, runtime_calls=len(runtime)),
            key="inputs:no-kernels-range-profiling")
    if launches:
        return Finding(
            Kind.INPUTS, Severity.WARNING,
            f"The traces hold {launches} kernel launches but no kernel events (CUPTI activity records missing)",
            skipped + "ProfilerActivity.CUDA was on (the CUDA runtime calls are traced) but no kernel activity "
            "reached the trace: another CUPTI client (Nsight Systems / Nsight Compute) was attached, or the "
            "profile ended before the GPU work finished (call torch.cuda.synchronize() before leaving the "
            "profiler), or the CUPTI library does not match the driver.",
            InputsEvidence(kernel_launches=launches, runtime_calls=len(runtime)), key="inputs:no-kernels")
    return Finding(Kind.INPUTS, Severity.INFO, "The traces hold no GPU activity (CPU-only or CPU-side profile)",
                   skipped + "To profile the GPU, add ProfilerActivity.CUDA to torch.profiler's activities.",
                   key="inputs:cpu-only")


def _synthetic(store: Store) -> list[Finding]:
    made_up = store.run_info.synthetic_inputs
    if not made_up:
        return []
    every = any(s.path == "." for s in made_up)
    named = "; ".join(f"{s.path} ({s.what})" for s in made_up if s.path != ".")
    title = ("Every input is synthetic" + (f": {named}" if named else f" ({made_up[0].what})") if every
             else f"Some inputs are synthetic: {named}")
    return [Finding(Kind.INPUTS, Severity.INFO, title,
                    "Read the findings as a demonstration of what perftracker reports on such inputs, not as "
                    "measurements of a real job; the manifest (synthetic) says what made each input.",
                    InputsEvidence(synthetic_inputs=[s.to_dict() for s in made_up]), key="inputs:synthetic")]
