"""Where `tracekit parse` spends its time: a timeline of the parent and the per-chunk cost in a worker.

    python benchmarks/parse_phases.py benchmarks/data/large.pt.trace.json

Part 1 runs `parse_to_file` in-process and prints when each phase starts and ends (seconds since the
script started, imports included). Part 2 decodes the first few chunks in this process, one step at a
time, and prints the CPU milliseconds of each step per 24 MiB chunk (what every worker does per chunk).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import mmap  # noqa: E402
import resource  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from tracekit.data.store import CaptureWriter, encode_rows  # noqa: E402
from tracekit.parse import _fastscan  # noqa: E402
from tracekit.parse import decode as _decode  # noqa: E402
from tracekit.parse import fast as _fast  # noqa: E402
from tracekit.parse import parser as parse  # noqa: E402
from tracekit.parse.derive import needed_for_derive  # noqa: E402


def timeline(trace: Path) -> list[tuple[str, float]]:
    events: list[tuple[str, float]] = []

    def mark(what: str) -> None:
        events.append((what, round(time.perf_counter() - T0, 2)))

    def wrap(name, f):
        def inner(*a, **k):
            mark(f"{name} start")
            r = f(*a, **k)
            mark(f"{name} end")
            return r

        return inner

    patched = [
        (parse, "derive_steps"),
        (parse._decode, "locate_events"),
        (parse, "_decode_ranges"),
        (CaptureWriter, "__exit__"),
        (CaptureWriter, "write"),
    ]
    saved = [getattr(owner, name) for owner, name in patched]
    ranges = parse._decode_ranges
    cpu = {"writing event tables": 0.0}

    def timed(name, f):
        def inner(*a, **k):
            t = time.process_time()
            r = f(*a, **k)
            cpu[name] += time.process_time() - t
            return r

        return inner

    def decode_ranges(*a, **k):
        mark("workers start")
        for n, x in enumerate(ranges(*a, **k)):
            if n == 0:
                mark("first chunk back")
            yield x
        mark("last chunk back")

    parse.derive_steps = wrap("derive_steps", parse.derive_steps)
    parse._decode.locate_events = wrap("locate_events", parse._decode.locate_events)
    parse._decode_ranges = decode_ranges
    CaptureWriter.__exit__ = wrap("close", CaptureWriter.__exit__)
    CaptureWriter.write = timed("writing event tables", CaptureWriter.write)
    try:
        mark("parse start")
        self_cpu, child_cpu = _cpu()
        with tempfile.TemporaryDirectory() as tmp:
            parse.parse_to_file([trace], Path(tmp) / "capture.parquet")
        mark("parse end")
        self_after, child_after = _cpu()
    finally:
        for (owner, name), original in zip(patched, saved):
            setattr(owner, name, original)
    events.append((f"CPU of the parent process (all threads): {self_after - self_cpu:.2f} s", None))
    for name, t in cpu.items():
        events.append(
            (
                f"  of which {name} (appending the workers' row groups, + step rows): {t:.2f} s"
                if "writing" in name
                else f"  of which {name}: {t:.2f} s",
                None,
            )
        )
    events.append((f"CPU of the worker processes: {child_after - child_cpu:.2f} s", None))
    return events


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def per_chunk(trace: Path, chunks: int = 6) -> dict[str, float]:
    with open(trace, "rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    start = buf.find(b"[", buf.find(b'"traceEvents"'))
    ranges = _decode.split_points(buf, start, len(buf), parse.CHUNK_BYTES)[:chunks]
    cpu: dict[str, float] = {}

    def step(name, f, *a):
        t = time.process_time()
        out = f(*a)
        cpu[name] = cpu.get(name, 0.0) + time.process_time() - t
        return out

    for a, b in ranges:
        step("C scan only", _fastscan.scan, buf, a, b, True)
        batch, _ = step("scan + Arrow batch", _fast.decode, buf, "us", a, b, True)
        table = step("rank column", parse._with_rank, batch, 0)
        needed = step("derive subset", needed_for_derive, table)
        step("host span", parse._host_span, needed)
        step("event table encoded as row groups", encode_rows, table)
        step("derive part as LZ4 IPC", parse._pack, needed)
    return {k: 1000 * v / len(ranges) for k, v in cpu.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    args = ap.parse_args()
    print(f"decoder: {_fast.decoder_name()}")
    for what, t in timeline(args.trace):
        print(f"{t:6.2f} s  {what}" if t is not None else what)
    if _fast.available():
        print("per 24 MiB chunk, CPU ms:")
        for name, ms in per_chunk(args.trace).items():
            print(f"  {name}: {ms:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
