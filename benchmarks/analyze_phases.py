"""Where an in-process `tracekit analyze` (with the savings) spends its CPU and memory, phase by phase.

    python benchmarks/analyze_phases.py benchmarks/data/large.parquet [--repeat 5]

Runs what `tracekit.api.analyze` runs for a capture on disk, a phase at a time, and prints after each
its CPU seconds, the process's resident memory and the peak since the previous phase (VmHWM, reset
through /proc/self/clear_refs): read the columns, the frames and host threads (the table let go but for
its sync records while they are built, as `tracekit.api` does), the attribution, the merge, the graph,
the savings' replays. With --repeat N the sequence runs N times in the one process and each phase's
least CPU is printed last, with the savings' share (graph + replays over read + frames + attribution +
merge) of those minima and the median of each round's own share: the later rounds find their memory
mapped, and a round's phases run within seconds of each other, which steadies the share on a VM whose
speed and first-touch page faults vary from minute to minute.
"""

from __future__ import annotations

import inspect
import sys
import time

from vm import settle


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 2**20  # KiB -> GiB
    return out


def main(path: str, repeat: int = 1) -> int:
    least: dict = {}
    shares = []
    for i in range(repeat):
        if repeat > 1:
            print(f"round {i + 1}")
        cpu = one_round(path)
        for what, c in cpu.items():
            least[what] = min(least.get(what, c), c)
        shares.append(_share(cpu))
        if repeat > 1:
            print(f"  savings / analysis this round: {shares[-1]:.2f}x")
    if repeat > 1:
        print(f"least CPU of {repeat} rounds:")
        for what, cpu in least.items():
            print(f"  {what:28s} {cpu:5.2f} s")
        print(f"  savings / analysis of the least: {_share(least):.2f}x")
        print(f"  savings / analysis, median of the rounds': {sorted(shares)[len(shares) // 2]:.2f}x")
    return 0


def _share(cpu: dict) -> float:
    """The savings' CPU (graph + replays) over the analysis' own (read + frames + attribution + merge)."""
    analysis = sum(cpu[k] for k in ("read the columns", "frames, host threads", "attribution", "merge"))
    return (cpu["graph"] + cpu["savings' replays"]) / analysis


def one_round(path: str) -> dict:
    from tracekit.analysis.events import ANALYSIS_KINDS
    from tracekit.analysis.merge import merge
    from tracekit.analysis.partial import CaptureContext, Params, analyze_partial
    from tracekit.analysis.pipeline import prepare
    from tracekit.api.run import loaded_columns
    from tracekit.data.store import read_capture
    from tracekit.whatif.graph import sync_records
    from tracekit.whatif.predict import Replayer
    from tracekit.whatif.savings import cause_savings

    last = [time.process_time()]
    cpu: dict = {}

    def mark(what: str) -> None:
        now, mem = time.process_time(), _status()
        cpu[what] = now - last[0]
        print(
            f"{what:28s} CPU {now - last[0]:5.2f} s  RSS {mem['VmRSS']:.2f} GiB  peak {mem['VmHWM']:.2f} GiB"
        )
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current RSS
        last[0] = time.process_time()

    mark("imports")
    cap = read_capture(path, columns=loaded_columns(True), kinds=ANALYSIS_KINDS)  # as tracekit.api reads it
    mark("read the columns")
    # the table let go but for its sync records once the frames' rows are cut out, as tracekit.api does
    whole = prepare(
        cap, Params().sync_tolerance_ns, release=lambda: setattr(cap, "table", sync_records(cap.table))
    )
    mark("frames, host threads")
    parts = [
        analyze_partial(
            cap.table, CaptureContext.of(cap.meta), Params(), frames=whole.fr, threads=whole.threads
        )
    ]
    mark("attribution")
    merge(parts, cap.meta, Params(), path=cap.path)
    mark("merge")
    # as tracekit.whatif.savings.with_savings builds it (the keywords an older tree has, for --against runs)
    known = inspect.signature(Replayer.of).parameters
    rp = Replayer.of(
        cap, whole.fr, whole.threads, **{k: False for k in ("keep_frames", "unchanged") if k in known}
    )
    mark("graph")
    cause_savings(rp)
    mark("savings' replays")
    return cpu


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    settle("analyze")
    sys.exit(main(args.capture, args.repeat))
