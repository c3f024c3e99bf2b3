"""Make a large Kineto trace by repeating a real capture with shifted timestamps and ids.

    python benchmarks/gen_large_trace.py --size-mb 1024 -o benchmarks/data/large.pt.trace.json
    python benchmarks/gen_large_trace.py --size-mb 1024 --float-noise 0.01 \
        -o benchmarks/data/noisy.pt.trace.json

Copy k of the source's events is shifted by k × (the source's time span + 1 ms) and its ids
(External id, correlation, flow id, Python id/parent id, Ev Idx) by k × (the largest id + 1);
``ProfilerStep#N`` becomes ``ProfilerStep#(N + k × steps)``. Metadata events (ph M) are written once.
Times keep Kineto's format: µs with three decimals, exact (integer ns arithmetic on the text).

With ``--float-noise F``, a fraction F of the ``ts`` values (picked at random, seeded) is written the way
a script that shifts a trace with floats writes it (trace merging and trimming tools): the source time
and the shift added as doubles and printed with ``repr``, e.g. ``5128440295499.2295``. At these
magnitudes (~5e12 µs) a double's step is ~0.001 µs, so ``repr`` needs four decimals for about half
of the sums; when it would print three, the next double up is taken, so every picked value has float
noise (and is within ~1 ns of the exact time).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT / "fixtures" / "h200_probe" / "tiny.pt.trace.json.gz"

# "key": number — the fields that are shifted in each copy.
_SLOT = re.compile(
    rb'"(?P<key>ts|External id|correlation|id|Python id|Python parent id|Ev Idx)": ?(?P<value>-?[0-9.]+)'
    rb'|"ProfilerStep#(?P<step>\d+)"'
)


def _ns(text: bytes) -> int:
    whole, _, frac = text.decode().partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3]) * (1 if not whole.startswith("-") else -1)


def _us(ns: int) -> bytes:
    return f"{ns // 1000}.{ns % 1000:03d}".encode()


def split_trace(text: bytes) -> tuple[bytes, list[bytes], bytes]:
    """(text before the events, each event's text, text after the events) of a Kineto trace."""
    doc = json.loads(text)
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    end = text.rindex(b"]")
    # Kineto writes one event per "{ ... }" block at depth 1 of the array; split with a bracket counter.
    events, depth, in_str, esc, begin = [], 0, False, False, None
    body = text[start:end]
    for i, ch in enumerate(body):
        if in_str:
            if esc:
                esc = False
            elif ch == 0x5C:  # backslash
                esc = True
            elif ch == 0x22:
                in_str = False
            continue
        if ch == 0x22:
            in_str = True
        elif ch == 0x7B:
            if depth == 0:
                begin = i
            depth += 1
        elif ch == 0x7D:
            depth -= 1
            if depth == 0:
                events.append(body[begin : i + 1])
    assert len(events) == len(doc["traceEvents"]), "event split does not match the JSON"
    return text[:start], events, text[end:]


def compile_event(ev: bytes) -> list:
    """An event as literal pieces and (kind, base value) slots to shift per copy."""
    parts: list = []
    pos = 0
    for m in _SLOT.finditer(ev):
        if m.group("step") is not None:
            parts.append(ev[pos : m.start("step")])
            parts.append(("s", int(m.group("step"))))
            pos = m.end("step")
            continue
        key, value = m.group("key"), m.group("value")
        parts.append(ev[pos : m.start("value")])
        if key == b"ts":
            parts.append(("t", _ns(value)))
        elif b"." in value:
            parts.append(value)
        else:
            parts.append(("i", int(value)))
        pos = m.end("value")
    parts.append(ev[pos:])
    return parts


def render(
    parts: list, dt: int, di: int, ds: int, noise: float = 0.0, rnd: random.Random | None = None
) -> bytes:
    """One event's text with its times shifted by dt ns, ids by di and step numbers by ds; with `noise`,
    that fraction of its times written with float noise (`noisy`)."""
    piece = []
    for p in parts:
        if type(p) is bytes:
            piece.append(p)
        elif p[0] == "t":
            if noise and rnd is not None and rnd.random() < noise:
                piece.append(noisy(p[1], dt))
            else:
                piece.append(_us(p[1] + dt))
        elif p[0] == "i":
            piece.append(b"%d" % (p[1] + di))
        else:
            piece.append(b"%d" % (p[1] + ds))
    return b"".join(piece)


def noisy(ns: int, dt: int) -> bytes:
    """The time ns + dt (ns) as a float shift writes it: float(µs text) + dt / 1000, printed by repr, with
    more than three decimals (the next double up when the sum prints with three or fewer; above ~1e13 µs
    no double has four decimals, and the sum is written as it prints)."""
    value = float(_us(ns)) + dt / 1000
    text = repr(value)
    for _ in range(4):
        if len(text.partition(".")[2]) > 3:
            break
        value = math.nextafter(value, math.inf)
        text = repr(value)
    return text.encode()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="a real trace (.json or .json.gz)")
    ap.add_argument("--size-mb", type=float, default=1024, help="target size of the output, MiB")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument(
        "--float-noise",
        type=float,
        default=0.0,
        metavar="F",
        help="write this fraction of the ts values with float noise (e.g. 0.01), as float shifting tools do",
    )
    ap.add_argument("--seed", type=int, default=13, help="random seed of --float-noise")
    args = ap.parse_args(argv)
    rnd = random.Random(args.seed)

    raw = args.source.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    head, events, tail = split_trace(text)
    doc = json.loads(text)
    # Kineto writes the metadata events (ph M) and its own span/instant events (string pid) once, at the end.
    once = [d.get("ph") == "M" or not isinstance(d.get("pid"), int) for d in doc["traceEvents"]]
    tail_events = [compile_event(e) for e, o in zip(events, once) if o]
    body = [compile_event(e) for e, o in zip(events, once) if not o]
    times = [(_ns(str(d["ts"]).encode()), int(float(d.get("dur", 0)) * 1000)) for d in doc["traceEvents"]]
    span_ns = max(t + d for t, d in times) - min(t for t, _ in times) + 1_000_000
    ids = [p[1] for parts in body for p in parts if isinstance(p, tuple) and p[0] == "i"]
    id_step = max(ids, default=0) + 1
    steps = [p[1] for parts in body for p in parts if isinstance(p, tuple) and p[0] == "s"]
    step_step = max(steps, default=0) + 1
    copy_bytes = sum(len(e) + 4 for e in events)
    copies = max(1, int(args.size_mb * 2**20 / copy_bytes))

    args.output.parent.mkdir(parents=True, exist_ok=True)
    n_events = 0
    with open(args.output, "wb") as out:
        out.write(head)
        for k in range(copies):
            chunk = [
                render(parts, k * span_ns, k * id_step, k * step_step, args.float_noise, rnd)
                for parts in body
            ]
            out.write(b"\n  " if k == 0 else b",\n  ")
            out.write(b",\n  ".join(chunk))
            n_events += len(chunk)
        last = copies - 1
        out.write(b",\n  ")
        out.write(b",\n  ".join(render(p, last * span_ns, 0, 0) for p in tail_events))
        n_events += len(tail_events)
        out.write(b"\n")
        out.write(tail)
    size = args.output.stat().st_size
    noise = f", {args.float_noise:.1%} of ts values with float noise" if args.float_noise else ""
    print(
        f"wrote {args.output}: {size / 2**20:.0f} MiB, {n_events:,} events, "
        f"{copies} copies of {args.source.name}{noise}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
