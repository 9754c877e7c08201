#!/usr/bin/env python3
"""perftracker vs Holistic Trace Analysis (HTA): load + temporal breakdown + comm/compute overlap.

Runs both tools on the same traces, each in a fresh subprocess, and reports wall time, the peak
resident memory of the whole process tree (worker processes included) and perftracker's parse
throughput next to a bare `orjson.loads` of the same bytes (the floor).

    .venv/bin/python benchmarks/bench_vs_hta.py                 # sizes 1 8 16, 2 repeats
    .venv/bin/python benchmarks/bench_vs_hta.py --sizes 1 --repeat 1
    .venv/bin/python benchmarks/bench_vs_hta.py --hta 0.5.0 --trace path/to/trace.json.gz

The trace is `--trace`, by default the HTA test trace df_index_resolver.json.gz of the shared folder next to
the checkout (../shared/traces/hta/, see its PROVENANCE.md) when it is there. HTA is the current release by
default: PyPI's `traceinsight` (0.6.x, import name `hta`, as HTA 0.5.0's `HolisticTraceAnalysis`); `--hta
0.5.0` measures the older one. Each is installed by this script into benchmarks/.venv-hta-<release>
(git-ignored), never into the project's environment and never by CI. Results go to benchmarks/results/bench_vs_hta.json (git-ignored).
See benchmarks/README.md for what is measured and the numbers on a reference machine.

The script has three internal child modes (`_child hta|pt|parse`); the HTA child runs under the HTA
virtual environment's interpreter and imports nothing from perftracker.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# release -> (the PyPI requirement, its distribution name); both install the import package `hta`
HTA_RELEASES = {"traceinsight": ("traceinsight>=0.6,<0.7", "traceinsight"),
                "0.5.0": ("HolisticTraceAnalysis==0.5.0", "HolisticTraceAnalysis")}
SHARED_TRACE = REPO.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
RESULTS = HERE / "results" / "bench_vs_hta.json"
RESULT_TAG = "BENCH_RESULT "
MB = 1e6  # decimal megabytes throughout (the trace is "53.7 MB" = 53,733,385 bytes)

# Targets from the issue, checked at the largest size.
TARGET_SPEEDUP = 5.0
TARGET_PARSE_OVER_FLOOR = 2.0


# --------------------------------------------------------------------------------------------
# Child processes: each prints one line `BENCH_RESULT {json}` on stdout.
# --------------------------------------------------------------------------------------------

def _summarize_frame(frame: Any, max_rows: int = 2) -> list[dict[str, Any]]:
    """First rows of a result frame as plain JSON, to cross-check the two tools."""
    rows = frame.reset_index().head(max_rows).to_dict(orient="records")
    return [{str(k): (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]


def child_hta(folder: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    import hta  # noqa: F401
    import pandas
    from hta.trace_analysis import TraceAnalysis
    t1 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=folder)
    t2 = time.perf_counter()
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    overlap = analyzer.get_comm_comp_overlap(visualize=False)
    t3 = time.perf_counter()
    from importlib.metadata import PackageNotFoundError, version
    hta_version = "?"
    for distribution in ("traceinsight", "HolisticTraceAnalysis"):  # the current release's name, then 0.5's
        try:
            hta_version = f"{distribution} {version(distribution)}"
            break
        except PackageNotFoundError:  # pragma: no cover - informational only
            continue
    return {
        "tool": "hta", "hta_version": hta_version, "pandas": pandas.__version__,
        "n_ranks": len(analyzer.t.traces),
        "n_events": int(sum(len(df) for df in analyzer.t.traces.values())),
        "import_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2, "work_s": t3 - t1,
        "temporal": _summarize_frame(temporal), "overlap": _summarize_frame(overlap),
    }


def child_pt(folder: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    import pandas

    import perftracker
    from perftracker.analyzers.traces.gpu_time import breakdown
    from perftracker.collectors.loading import LoadOptions, load_path
    t1 = time.perf_counter()
    store = load_path(Path(folder), LoadOptions(cache_dir=None, workers=0))
    t2 = time.perf_counter()
    ours = breakdown(store)
    hta_like = breakdown(store, hta_compat=True)
    t3 = time.perf_counter()
    cols = ["rank", "idle_pct", "compute_pct", "non_compute_pct", "overlap_pct"]
    return {
        "tool": "perftracker", "perftracker_version": perftracker.__version__, "pandas": pandas.__version__,
        "n_ranks": int(store.ranks["rank"].nunique()) if not store.ranks.empty else 0,
        "n_events": len(store.events),
        "import_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2, "work_s": t3 - t1,
        "breakdown_rows": len(ours),
        "hta_compat": _summarize_frame(hta_like[[c for c in cols if c in hta_like.columns]]),
    }


def _best_of(fn: Any, repeat: int) -> tuple[float, Any]:
    import gc
    best, out = float("inf"), None
    for _ in range(repeat):
        out = None
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def child_parse(trace: str, repeat: int) -> dict[str, Any]:
    import orjson

    from perftracker.collectors.traces.kineto_read import parse_trace
    src = Path(trace)
    data = gzip.decompress(src.read_bytes()) if src.name.endswith(".gz") else src.read_bytes()
    size = len(data)
    res: dict[str, Any] = {"bytes": size, "repeat": repeat}
    with tempfile.TemporaryDirectory(prefix="pt-bench-parse-") as tmp:
        plain = Path(tmp) / "trace.json"
        plain.write_bytes(data)
        gz = Path(tmp) / "trace.json.gz"
        gz.write_bytes(src.read_bytes() if src.name.endswith(".gz") else gzip.compress(data))
        res["orjson_loads_s"], _ = _best_of(lambda: orjson.loads(data), repeat)
        res["read_bytes_json_s"], _ = _best_of(lambda: plain.read_bytes(), repeat)
        res["gunzip_s"], _ = _best_of(lambda: gzip.decompress(gz.read_bytes()), repeat)
        res["parse_trace_json_s"], parsed = _best_of(lambda: parse_trace(plain), repeat)
        res["n_events"] = len(parsed.names)
        parsed = None
        res["parse_trace_gz_s"], _ = _best_of(lambda: parse_trace(gz), repeat)
        try:  # perftracker's typed decode alone (internal API; informational)
            import msgspec

            from perftracker.collectors.traces.kineto_read import TraceDoc
            res["msgspec_decode_s"], _ = _best_of(lambda: msgspec.json.decode(data, type=TraceDoc), repeat)
        except (ImportError, AttributeError) as exc:  # pragma: no cover
            res["msgspec_decode_error"] = repr(exc)
    for key in [k for k in res if k.endswith("_s")]:
        res[key.replace("_s", "_MBps")] = size / MB / res[key]
    res["parse_over_floor_json"] = res["parse_trace_json_s"] / res["orjson_loads_s"]
    res["parse_over_floor_gz"] = res["parse_trace_gz_s"] / (res["orjson_loads_s"] + res["gunzip_s"])
    return res


def child_main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "hta":
        out = child_hta(argv[1])
    elif mode == "pt":
        out = child_pt(argv[1])
    elif mode == "parse":
        out = child_parse(argv[1], int(argv[2]))
    else:
        raise SystemExit(f"unknown child mode {mode}")
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(out, default=str), flush=True)


# --------------------------------------------------------------------------------------------
# Parent: environment, data, measurement, report.
# --------------------------------------------------------------------------------------------

def ensure_hta_venv(release: str) -> Path:
    """The interpreter of benchmarks/.venv-hta-<release>, created with that HTA release the first time."""
    requirement, _ = HTA_RELEASES[release]
    venv = HERE / f".venv-hta-{release}"
    py = venv / "bin" / "python"
    ok = py.exists() and subprocess.run([str(py), "-c", "import hta.trace_analysis"],
                                        check=False, capture_output=True).returncode == 0
    if not ok:
        print(f"creating {venv} and installing {requirement} (one time)...", flush=True)
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement], check=True)
    return py


_DIST_LINE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*\}')


def make_rank_folder(template: bytes, base_info: dict[str, Any], n: int, folder: Path) -> None:
    """n gzip copies of the trace, rank-<i>.json.gz, with distributedInfo.rank = i and world_size = n.

    Only the distributedInfo object is rewritten, in place; every other byte (the events included)
    is the original's. It is written as `"rank": i` with a space: HTA 0.5 finds each file's rank
    with the regex `"rank":\\s+(\\d+)` reading line by line, so compact JSON (orjson's) would give
    every copy rank 0.
    """
    folder.mkdir(parents=True, exist_ok=True)
    m = _DIST_LINE.search(template)
    if m is None:
        raise SystemExit("the trace has no distributedInfo object to rewrite")
    head, tail = template[:m.start()], template[m.end():]
    for i in range(n):
        info = {**base_info, "rank": i, "world_size": n}
        blob = head + b'"distributedInfo": ' + json.dumps(info).encode() + tail
        with open(folder / f"rank-{i}.json.gz", "wb") as fh:
            fh.write(gzip.compress(blob, compresslevel=6, mtime=0))


def run_measured(cmd: list[str], log: Path, interval: float, timeout: float,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run cmd; wall time from the parent, peak of the summed RSS of its process tree (sampled)."""
    import psutil

    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=str(REPO), env=env)
        ps = psutil.Process(proc.pid)
        peak, peak_procs, samples = 0, 0, 0
        while proc.poll() is None:
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                break
            try:
                procs = [ps] + ps.children(recursive=True)
            except psutil.Error:
                procs = []
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            samples += 1
            if rss > peak:
                peak, peak_procs = rss, len(procs)
            time.sleep(interval)
        rc = proc.wait()
        wall = time.perf_counter() - t0
    result: dict[str, Any] = {"rc": rc, "wall_s": wall, "peak_tree_rss_mb": peak / MB,
                              "procs_at_peak": peak_procs, "samples": samples}
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        if line.startswith(RESULT_TAG):
            result["child"] = json.loads(line[len(RESULT_TAG):])
    if rc != 0 or "child" not in result:
        result["error"] = text[-3000:]
    return result


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpus": os.cpu_count()}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        m = re.search(r"model name\s*:\s*(.*)", cpuinfo)
        info["cpu_model"] = m.group(1).strip() if m else ""
    except OSError:
        pass
    try:
        import psutil
        info["mem_total_gb"] = psutil.virtual_memory().total / 1e9
    except ImportError:
        pass
    return info


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        child_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=None, help="trace to replicate (.json or .json.gz; default: "
                    f"{SHARED_TRACE.name} of ../shared/traces/hta/ next to the checkout, when it is there)")
    ap.add_argument("--hta", choices=sorted(HTA_RELEASES), default="traceinsight",
                    help="the HTA release to measure: traceinsight (PyPI's current HTA, 0.6.x) or 0.5.0")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 16], help="numbers of ranks (copies)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per tool and size, alternating the tools")
    ap.add_argument("--parse-repeat", type=int, default=3, help="timings per parse measurement (best is kept)")
    ap.add_argument("--tools", nargs="+", default=["hta", "pt"], choices=["hta", "pt"])
    ap.add_argument("--no-parse", action="store_true", help="skip the parse-throughput measurement")
    ap.add_argument("--interval", type=float, default=0.02, help="memory sampling interval, seconds")
    ap.add_argument("--timeout", type=float, default=3600, help="per run, seconds")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write the copies (default: a temp dir)")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.trace is None:
        if not SHARED_TRACE.is_file():
            ap.error(f"no --trace given and no {SHARED_TRACE} (the shared folder next to the checkout): pass "
                     "--trace with a torch.profiler trace, e.g. HTA's tests/data/df_index_resolver/"
                     "df_index_resolver.json.gz from github.com/facebookresearch/HolisticTraceAnalysis")
        args.trace = SHARED_TRACE

    import orjson  # the project's environment; used once to read distributedInfo

    hta_py = ensure_hta_venv(args.hta) if "hta" in args.tools else None
    pt_py = Path(sys.executable)
    script = str(Path(__file__).resolve())

    raw = args.trace.read_bytes()
    template = gzip.decompress(raw) if args.trace.name.endswith(".gz") else raw
    doc = orjson.loads(template)
    base_info = dict(doc.get("distributedInfo") or {})
    n_source_events = len(doc.get("traceEvents") or [])
    del doc

    work = Path(tempfile.mkdtemp(prefix="bench-vs-hta-", dir=args.workdir))
    results: dict[str, Any] = {
        "trace": str(args.trace), "trace_bytes": len(template), "trace_events": n_source_events,
        "machine": machine_info(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg_start": os.getloadavg(), "sizes": {}, "runs": [],
    }
    print(f"trace {args.trace.name}: {len(template) / MB:.1f} MB, {n_source_events} events; "
          f"machine: {results['machine'].get('cpu_model', '?')}, {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    child_env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        for n in args.sizes:
            folder = work / f"ranks-{n}"
            make_rank_folder(template, base_info, n, folder)
            per_tool: dict[str, list[dict[str, Any]]] = {t: [] for t in args.tools}
            for rep in range(args.repeat):
                order = list(args.tools) if rep % 2 == 0 else list(reversed(args.tools))
                for tool in order:
                    py = hta_py if tool == "hta" else pt_py
                    cmd = [str(py), script, "_child", tool, str(folder)]
                    log = work / f"{tool}-{n}-{rep}.log"
                    r = run_measured(cmd, log, args.interval, args.timeout, child_env)
                    r.update({"tool": tool, "size": n, "rep": rep, "loadavg": os.getloadavg()[0]})
                    results["runs"].append(r)
                    per_tool[tool].append(r)
                    status = "ok" if "error" not in r else "FAILED (see results JSON)"
                    work_s = r.get("child", {}).get("work_s")
                    print(f"  size {n:>2} rep {rep} {tool:>4}: wall {r['wall_s']:7.2f} s "
                          f"(load+analyze {fmt(work_s, '.2f')} s), peak tree RSS {r['peak_tree_rss_mb']:8.0f} MB, "
                          f"load avg {r['loadavg']:.2f} - {status}", flush=True)
            summary: dict[str, Any] = {}
            for tool, runs in per_tool.items():
                good = [r for r in runs if "error" not in r]
                if good:
                    summary[tool] = {
                        "wall_s": min(r["wall_s"] for r in good),
                        "work_s": min(r["child"]["work_s"] for r in good),
                        "peak_mb": max(r["peak_tree_rss_mb"] for r in good),
                    }
            if "hta" in summary and "pt" in summary:
                summary["speedup"] = summary["hta"]["wall_s"] / summary["pt"]["wall_s"]
                summary["speedup_work"] = summary["hta"]["work_s"] / summary["pt"]["work_s"]
                summary["mem_ratio_hta_over_pt"] = summary["hta"]["peak_mb"] / summary["pt"]["peak_mb"]
            results["sizes"][str(n)] = summary
            shutil.rmtree(folder, ignore_errors=True)

        if not args.no_parse:
            log = work / "parse.log"
            r = run_measured([str(pt_py), script, "_child", "parse", str(args.trace), str(args.parse_repeat)],
                             log, args.interval, args.timeout, child_env)
            results["parse"] = r.get("child", {"error": r.get("error", "")})
    finally:
        results["loadavg_end"] = os.getloadavg()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2, default=str))
        shutil.rmtree(work, ignore_errors=True)

    print_report(results, args.output)
    return 0


def print_report(results: dict[str, Any], output: Path) -> None:
    print()
    print("wall = whole fresh process, from the parent (imports included); work = load + analyses in-process;")
    print("peak = max over ~20 ms samples of the summed RSS of the process and all its descendants.")
    head = (f"{'ranks':>5} {'HTA wall s':>10} {'pt wall s':>9} {'speedup':>7} {'(work)':>7} "
            f"{'HTA peak MB':>11} {'pt peak MB':>10} {'HTA/pt mem':>10}")
    print(head)
    print("-" * len(head))
    for n, s in results["sizes"].items():
        h, p = s.get("hta", {}), s.get("pt", {})
        print(f"{n:>5} {fmt(h.get('wall_s'), '10.2f')} {fmt(p.get('wall_s'), '9.2f')} "
              f"{fmt(s.get('speedup'), '6.1f')}x {fmt(s.get('speedup_work'), '6.1f')}x "
              f"{fmt(h.get('peak_mb'), '11.0f')} {fmt(p.get('peak_mb'), '10.0f')} "
              f"{fmt(s.get('mem_ratio_hta_over_pt'), '9.2f')}x")
    parse = results.get("parse") or {}
    if "orjson_loads_s" in parse:
        size = parse["bytes"] / MB
        print()
        print(f"parse of one {size:.1f} MB trace (best of {parse['repeat']}):")
        print(f"  orjson.loads(bytes), the floor   {parse['orjson_loads_s']:6.3f} s  {parse['orjson_loads_MBps']:7.1f} MB/s")
        print(f"  parse_trace(.json)               {parse['parse_trace_json_s']:6.3f} s  "
              f"{parse['parse_trace_json_MBps']:7.1f} MB/s  = {parse['parse_over_floor_json']:.2f}x the floor")
        print(f"  parse_trace(.json.gz)            {parse['parse_trace_gz_s']:6.3f} s  "
              f"{parse['parse_trace_gz_MBps']:7.1f} MB/s  = {parse['parse_over_floor_gz']:.2f}x "
              f"(floor + gunzip {parse['gunzip_s']:.3f} s)")
        if "msgspec_decode_s" in parse:
            print(f"  (msgspec typed decode alone      {parse['msgspec_decode_s']:6.3f} s  "
                  f"{parse['msgspec_decode_MBps']:7.1f} MB/s)")
    sizes = results["sizes"]
    if sizes:
        big = max(sizes, key=int)
        s = sizes[big]
        print()
        checks = []
        if "speedup" in s:
            checks.append(f"{big} ranks: speedup {s['speedup']:.1f}x (target >= {TARGET_SPEEDUP:.0f}x: "
                          f"{'met' if s['speedup'] >= TARGET_SPEEDUP else 'MISSED'})")
            checks.append(f"peak memory {s['pt']['peak_mb']:.0f} vs HTA {s['hta']['peak_mb']:.0f} MB "
                          f"(target lower: {'met' if s['pt']['peak_mb'] < s['hta']['peak_mb'] else 'MISSED'})")
        if "parse_over_floor_json" in parse:
            checks.append(f"parse {parse['parse_over_floor_json']:.2f}x the floor (target <= "
                          f"{TARGET_PARSE_OVER_FLOOR:.0f}x: "
                          f"{'met' if parse['parse_over_floor_json'] <= TARGET_PARSE_OVER_FLOOR else 'MISSED'})")
        for c in checks:
            print("target: " + c)
    print(f"\nresults: {output}")


if __name__ == "__main__":
    sys.exit(main())
