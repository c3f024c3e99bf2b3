"""Benchmark `tracekit parse` on a large trace: wall time and peak memory, and HTA on the same file.

    python benchmarks/gen_large_trace.py --size-mb 1024 -o benchmarks/data/large.pt.trace.json
    python benchmarks/bench_parse.py benchmarks/data/large.pt.trace.json \
        [--hta-python /tmp/htavenv/bin/python] [--repeat 3]

With several traces (e.g. the clean trace and its --float-noise form), the runs alternate between them
(A, B, A, B, ...), so that the load of a shared machine falls on both alike, and the ratio of each
trace's median wall time to the first one's is printed. --source DIR runs another checkout's tracekit
(its C extension built in place) with this interpreter, for A/B comparisons of two versions; then the
runs alternate between this checkout and DIR for every trace.

Each tool runs as its own process. Peak memory is sampled every 20 ms from /proc over the process and
all its descendants (tracekit decodes in forked worker processes): the sum of their PSS (shared pages
split between the processes sharing them) and, for reference, the sum of their RSS (shared pages counted
once per process).
HTA (PyPI `holistictraceanalysis`, never a tracekit dependency) runs from a separate interpreter when
--hta-python is given: `TraceAnalysis(trace_dir=...)` on a folder holding only a link to the file.

CPU seconds (the process and all its workers, from getrusage) are printed beside wall time, and the
1-minute load average at the start of each run beside it: on a shared machine wall time follows the
other jobs, CPU time much less. With traces of several sizes (a small one, e.g. the gzip'd probe
fixture, measures the start-up), a least-squares line through the CPU medians gives CPU-s per GB and
the fixed cost. --reference times, in the same rounds, a plain decode of each trace by msgspec with
Python's garbage collector off, in a fresh process (read the file, `msgspec.json.decode` it, nothing
else): a reference for what a good JSON reader costs, producing Python objects, not a capture.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vm import tree_env

ROOT = Path(__file__).resolve().parent.parent

HTA_SCRIPT = """
import sys, time
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
n = sum(len(analysis.t.get_trace(r)) for r in analysis.t.get_ranks())
print(f"hta loaded {n} events in {time.perf_counter() - t:.1f} s")
"""


REFERENCE_SCRIPT = """
import gc, gzip, sys, msgspec
gc.disable()
path = sys.argv[1]
data = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
doc = msgspec.json.decode(data)
print(f"msgspec decoded {len(doc['traceEvents'])} events")
"""


# Which decoder a checkout's tracekit uses (tracekit.parse.fast; tracekit._fast before the layout change).
DECODER_NAME = """
try:
    from tracekit.parse import fast
except ImportError:
    from tracekit import _fast as fast
print(fast.decoder_name())
"""


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) bytes of `pid` and all its descendants. Forked workers share pages with their parent:
    summed RSS counts a shared page once per process, PSS splits it between them (the fair total)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid, pages = int(fields[1]), int(fields[21])
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE")
    total_rss = total_pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        total_rss += rss.get(p, 0)
        total_pss += _pss(p)
        todo.extend(children.get(p, []))
    return total_rss, total_pss


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(
    cmd: list[str],
    env: dict | None = None,
    timeout: float | None = None,
    sample: bool = True,
    cwd: Path | None = None,
) -> dict:
    """Run `cmd`; its wall time, peak process-tree memory (summed RSS and PSS; with `sample`) and output.

    Sampling reads /proc/PID/smaps_rollup of every process of the tree every 20 ms, which walks their
    page tables (a 1 GB mapping each): on two cores that slows the measured run by ~15 %, so timing
    runs are made without it."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
    )
    peak_rss = peak_pss = 0
    if not sample:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    while proc.poll() is None:
        if timeout is not None and time.perf_counter() - start > timeout:
            proc.kill()
            proc.wait()
            return {
                "rc": "timeout",
                "wall_s": timeout,
                "peak_rss": peak_rss,
                "peak_pss": peak_pss,
                "output": "",
            }
        rss, pss = _tree_memory(proc.pid)
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out = proc.stdout.read() if proc.stdout else ""
    return {
        "rc": proc.returncode,
        "wall_s": wall,
        "peak_rss": peak_rss,
        "peak_pss": peak_pss,
        "output": out.strip(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path, nargs="+", help="large traces (see gen_large_trace.py)")
    ap.add_argument("--hta-python", help="an interpreter with holistictraceanalysis installed")
    ap.add_argument("--hta-timeout", type=float, default=1800, help="seconds before HTA is stopped")
    ap.add_argument("--repeat", type=int, default=1, help="runs of tracekit per trace (all are printed)")
    ap.add_argument("--source", type=Path, help="also run the tracekit of this checkout, alternately")
    ap.add_argument("--reference", action="store_true", help="also time msgspec (GC off) on each trace")
    args = ap.parse_args(argv)

    print(f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    roots = [ROOT] + ([args.source.resolve()] if args.source else [])
    for root in roots:
        decoder = subprocess.run(
            [sys.executable, "-c", DECODER_NAME],
            capture_output=True,
            text=True,
            env=tree_env(root),
            cwd=root,  # `python -c` and `-m` put the working directory first on sys.path
        ).stdout.strip()
        print(f"{root}: decoder {decoder} (TRACEKIT_DECODER=msgspec forces msgspec)")
    cases = [(trace, root) for trace in args.traces for root in roots]
    for trace in args.traces:
        print(f"trace: {trace} ({trace.stat().st_size / 2**20:.0f} MiB)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "capture.parquet"

        def command(trace: Path, root: Path) -> dict:
            cmd = [sys.executable, "-m", "tracekit", "parse", str(trace.resolve()), "-o", str(out), "--force"]
            return {"cmd": cmd, "env": tree_env(root), "cwd": root}

        runs: dict = {case: [] for case in cases}
        reference: dict = {trace: [] for trace in args.traces}
        for _ in range(args.repeat):
            for case in cases:  # alternate: one run of each case per round
                load = os.getloadavg()[0]
                before = _children_cpu()
                r = measure(**command(*case), sample=False)
                r["cpu_s"], r["load"] = _children_cpu() - before, load
                if r["rc"] != 0:
                    print(r["output"])
                    return 1
                runs[case].append(r)
            for trace in args.traces if args.reference else ():
                load = os.getloadavg()[0]
                before = _children_cpu()
                r = measure([sys.executable, "-c", REFERENCE_SCRIPT, str(trace)], sample=False)
                r["cpu_s"], r["load"] = _children_cpu() - before, load
                reference[trace].append(r)
        medians, cpu_medians = {}, {}
        for case in cases:
            trace, root = case
            best = min(runs[case], key=lambda r: r["wall_s"])
            memory = measure(**command(*case))  # one more run, sampled, for the peak memory
            label = trace.name + (f" [{root}]" if len(roots) > 1 else "")
            print(
                f"tracekit parse {label}: {best['wall_s']:.1f} s wall, {best['cpu_s']:.1f} s CPU, "
                f"peak memory {_gib(memory['peak_pss'])} PSS ({_gib(memory['peak_rss'])} summed RSS, "
                f"in a sampled run), {out.stat().st_size / 2**20:.0f} MiB Parquet"
            )
            print(f"  ({best['output'].splitlines()[-1]})")
            walls = sorted(r["wall_s"] for r in runs[case])
            medians[case] = walls[len(walls) // 2]
            cpus = sorted(r["cpu_s"] for r in runs[case])
            cpu_medians[case] = cpus[len(cpus) // 2]
            print(
                f"  all {len(walls)} runs: wall {', '.join(f'{w:.1f}' for w in walls)} s "
                f"(median {medians[case]:.1f} s); CPU median {cpus[len(cpus) // 2]:.1f} s"
            )
            print("  runs (wall / CPU s at load): " + _runs(runs[case]))
            if reference[trace] and root == roots[0]:
                ref = reference[trace]
                cpu = sorted(r["cpu_s"] for r in ref)[len(ref) // 2]
                wall = sorted(r["wall_s"] for r in ref)[len(ref) // 2]
                print(f"  msgspec, GC off: wall median {wall:.2f} s, CPU median {cpu:.2f} s; " + _runs(ref))
        print(f"load after: {os.getloadavg()[0]:.1f}")
        sizes = {trace: trace.stat().st_size / 1e9 for trace in args.traces}
        for root in roots if len(set(sizes.values())) > 1 else ():
            gb = [sizes[t] for t, r in cases if r == root]
            cpu = [cpu_medians[(t, r)] for t, r in cases if r == root]
            slope, fixed = _line(gb, cpu)
            where = f" [{root}]" if len(roots) > 1 else ""
            print(f"CPU median = {fixed:.2f} s + {slope:.2f} s per GB of trace (least squares){where}")
        if len(cases) > 1:
            first = cases[0]
            for case in cases[1:]:
                print(
                    f"median wall {case[0].name}{f' [{case[1]}]' if len(roots) > 1 else ''} / "
                    f"{first[0].name}{f' [{first[1]}]' if len(roots) > 1 else ''}: "
                    f"{medians[case] / medians[first]:.2f}x "
                    f"(median CPU {cpu_medians[case] / cpu_medians[first]:.2f}x)"
                )
        if args.hta_python:
            trace = args.traces[0]
            best = min(runs[cases[0]], key=lambda r: r["wall_s"])
            memory = measure(**command(*cases[0]))
            trace_dir = Path(tmp) / "hta"
            trace_dir.mkdir()
            (trace_dir / trace.name).symlink_to(trace.resolve())
            before = _children_cpu()
            h = measure([args.hta_python, "-c", HTA_SCRIPT, str(trace_dir)], timeout=args.hta_timeout)
            h["cpu_s"] = _children_cpu() - before
            if h["rc"] == "timeout":
                print(
                    f"HTA TraceAnalysis: stopped after {args.hta_timeout:.0f} s without finishing, "
                    f"peak memory so far {_gib(h['peak_pss'])} PSS ({_gib(h['peak_rss'])} RSS)"
                )
                print(f"ratio HTA / tracekit: time > {h['wall_s'] / best['wall_s']:.0f}x")
                return 0
            if h["rc"] != 0:
                print("HTA failed:", h["output"][-2000:])
                return 1
            last = h["output"].splitlines()[-1] if h["output"] else ""
            print(
                f"HTA TraceAnalysis: {h['wall_s']:.1f} s wall, {h['cpu_s']:.1f} s CPU, peak memory "
                f"{_gib(h['peak_pss'])} PSS ({_gib(h['peak_rss'])} RSS)  ({last})"
            )
            print(
                f"ratio HTA / tracekit: time {h['wall_s'] / best['wall_s']:.1f}x, "
                f"peak memory (PSS) {h['peak_pss'] / memory['peak_pss']:.1f}x"
            )
    return 0


def _runs(runs: list[dict]) -> str:
    return ", ".join(f"{r['wall_s']:.2f}/{r['cpu_s']:.2f} at {r['load']:.1f}" for r in runs)


def _line(x: list[float], y: list[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((a - mx) ** 2 for a in x)
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx if sxx else 0.0
    return slope, my - slope * mx


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _children_cpu() -> float:
    """CPU seconds of all waited-for child processes so far (they include the workers of the child)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


if __name__ == "__main__":
    sys.exit(main())
