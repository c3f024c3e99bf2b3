"""The optional C decoder: `tracekit/parse/_fastscan.c` scans a JSON array of events into columns directly.

`decode(data, unit)` returns what `_decode.decode_events` returns, or None when the scanner declined
the input (not valid JSON): the caller then decodes it with msgspec, which handles every case and
produces the precise errors. Odd values and odd events do not decline the whole input: a number the
scanner does not read itself (an exponent, more digits than it takes) comes back as text and is
converted here by the msgspec path's own rules (`_decode.time_value`, `_decode._as_int`), and an event it
does not take (a non-string name, args that are not an object, an escaped key, ...) comes back as a
byte range that is decoded here with msgspec (`_decode.decode_items`) into its row. Both paths build
the batch with `_decode.assemble`, so the same rules apply. Without the compiled extension (a failed
build), or with TRACEKIT_DECODER=msgspec, `decode` always returns None.
"""

from __future__ import annotations

import decimal
from typing import Optional

import msgspec
import numpy as np
import pyarrow as pa

from tracekit.native import current
from tracekit.parse import decode as _decode
from tracekit.parse.decode import INT_ARGS
from tracekit.settings import setting

try:
    from tracekit.parse import _fastscan  # type: ignore[attr-defined]  # the C extension
except ImportError:  # the extension did not build: msgspec only
    _fastscan = None
_fastscan = current(_fastscan, "parse/_fastscan.c")  # a build from other sources: msgspec only

# Column order of the scanner's output (tracekit/parse/_fastscan.c, enums I_* and S_*).
INT_FIELDS = ("pid", "tid", "ts", "dur", "flow") + INT_ARGS
STR_FIELDS = ("ph", "cat", "name", "sync_kind", "collective", "pg_ranks", "name_arg", "input_dims")


def available() -> bool:
    """Whether the C decoder is compiled and enabled (TRACEKIT_DECODER=msgspec turns it off)."""
    return _fastscan is not None and setting("TRACEKIT_DECODER") != "msgspec"


def decoder_name() -> str:
    """'C scanner (tracekit.parse._fastscan)' or 'msgspec': which decoder parses traces here."""
    return "C scanner (tracekit.parse._fastscan)" if available() else "msgspec"


def scan(data, start: int = 0, stop: int = -1, bare: bool = False) -> Optional[tuple]:
    """The scanner's output for the JSON array of events data[start:stop] (with `bare`, the text between
    its brackets), or None (declined, or no extension): (n, ints, valid, codes, uniques, declined), the
    column arrays (INT_FIELDS × n int64, INT_FIELDS × n uint8, STR_FIELDS × n int32; read-only views
    of the block the scanner wrote, no copy) as _fastscan.c describes them."""
    if not available():
        return None
    out = _fastscan.scan(data, start, stop, bare)
    if out is None:
        return None
    n, cap, block, uniques, declined = out
    ni, ns = len(INT_FIELDS), len(STR_FIELDS)
    ints = np.frombuffer(block, np.int64, ni * cap).reshape(ni, cap)[:, :n]
    codes = np.frombuffer(block, np.int32, ns * cap, offset=8 * ni * cap).reshape(ns, cap)[:, :n]
    valid = np.frombuffer(block, np.uint8, ni * cap, offset=(8 * ni + 4 * ns) * cap).reshape(ni, cap)[:, :n]
    return n, ints, valid, codes, uniques, declined


def decode(
    data, unit: str, start: int = 0, stop: int = -1, bare: bool = False
) -> Optional[tuple[pa.RecordBatch, dict]]:
    """Like `_decode.decode_events(data[start:stop], unit=unit)` (with `bare`: of "[" + data[start:stop]
    + "]", without copying it), or None: decode this one with msgspec."""
    out = scan(data, start, stop, bare)
    if out is None:
        return None
    n, ints, valid, codes, uniques, declined = out
    skipped: dict = {}
    dropped: dict = {}
    if declined:
        filled = _fill_declined(
            data, np.frombuffer(declined, np.int64).reshape(-1, 3), ints, valid, codes, uniques
        )
        if filled is None:
            return None
        ints, valid, codes, skipped, dropped = filled
        n = ints.shape[1]
    if n == 0:
        return _decode._empty(), _decode._no_stats(skipped, dropped)
    coerced = None

    def int_col(i: int) -> tuple[np.ndarray, np.ndarray]:
        nonlocal coerced
        v = valid[i]
        texts = v == 2
        if not texts.any():
            return ints[i], v == 1
        # Strings (and number texts) where an integer is kept ("Spans", "0x0", "stream 7", 1.0, 1e3):
        # the msgspec path's coercion.
        if coerced is None:
            as_int = [_decode._as_int(t) for t in uniques[-1]]
            coerced = (
                np.array([0 if c is None else c for c in as_int], np.int64),
                np.array([c is not None for c in as_int], np.bool_),
            )
        values, ok = ints[i].copy(), v == 1
        at = np.flatnonzero(texts)
        values[at] = coerced[0][ints[i][at]]
        ok[at] = coerced[1][ints[i][at]]
        return values, ok

    fields = {f: i for i, f in enumerate(INT_FIELDS)}
    times = _times(ints, valid, fields, uniques[-1], unit)
    strings = {f: (codes[i], uniques[i]) for i, f in enumerate(STR_FIELDS)}
    decoded = _decode.Decoded(
        ph=strings["ph"],
        cat=strings["cat"],
        name=strings["name"],
        ts_ns=times["ts"],
        ts_state=times["ts_state"],
        dur_ns=times["dur"],
        ints={f: int_col(fields[f]) for f in ("pid", "tid", "flow", *_decode.INT_ARGS)},
        texts={
            "sync_kind": strings["sync_kind"],
            "collective": strings["collective"],
            "pg_ranks": strings["pg_ranks"],
            "name": strings["name_arg"],
            "input_dims": strings["input_dims"],
        },
        max_abs_ts=times["max_abs_ts"],
        fractional=times["fractional"],
    )
    return _decode.assemble(n, decoded, skipped, dropped)


# TIME_* state by the scanner's valid code: 0 null or missing, 1 a number, 2 text and 4 an integer beyond
# the milli range (their state is set per value), 3 true/false/an array/an object.
_STATE = np.array(
    [_decode.TIME_MISSING, _decode.TIME_OK, _decode.TIME_OK, _decode.TIME_NOT_NUMBER, _decode.TIME_OK],
    np.int8,
)


def _times(ints: np.ndarray, valid: np.ndarray, fields: dict, texts: list, unit: str) -> dict:
    """ts and dur in ns (values, ok), ts's TIME_* states, and the stats time_unit needs (the largest |ts|
    as written, whether any time has a fractional part), as the msgspec path computes them.

    The scanner gives value × 1000 rounded half to even (valid 1); an integer too large for that
    (valid 4: an ns trace's 1.7e18) as it is; anything else as text (valid 2), converted per distinct
    text by the msgspec path's rule (`_decode.time_value`)."""
    out: dict = {}
    max_abs = decimal.Decimal(0)
    fractional = False
    for name in ("ts", "dur"):
        milli, kind = ints[fields[name]], valid[fields[name]]
        ok = kind == 1
        ns = _to_ns(milli, unit)
        if name == "ts":
            state = _STATE[kind]
            if ok.any():
                max_abs = max(max_abs, decimal.Decimal(int(np.abs(milli[ok]).max())).scaleb(-3))
        fractional = fractional or bool((milli[ok] % 1000).any())
        big = np.flatnonzero(kind == 4)
        text = np.flatnonzero(kind == 2)
        if len(big) or len(text):
            ns = np.array(ns)  # a writable copy
        if len(big):  # |value| > 2**63 / 1000: fits as ns, not as µs
            if unit == "ns":
                ns[big], ok[big] = milli[big], True
            elif name == "ts":
                state[big] = _decode.TIME_OUT_OF_RANGE
            if name == "ts":
                max_abs = max(max_abs, decimal.Decimal(int(np.abs(milli[big]).max())))
        if len(text):
            codes, where = np.unique(milli[text], return_inverse=True)
            values = [_decode.time_value(texts[c]) for c in codes]
            converted = [_decode.time_ns(d, unit) if d is not None else None for d, _ in values]
            ns[text] = np.array([0 if v is None else v for v in converted], np.int64)[where]
            ok[text] = np.array([v is not None for v in converted], bool)[where]
            fractional = fractional or any(d is not None and d != d.to_integral_value() for d, _ in values)
            if name == "ts":
                states = [st if st != _decode.TIME_OK or v is not None else _decode.TIME_OUT_OF_RANGE
                          for (_, st), v in zip(values, converted)]  # fmt: skip
                state[text] = np.array(states, np.int8)[where]
                max_abs = max([max_abs] + [d.copy_abs() for d, _ in values if d is not None])
        out[name] = (ns, ok)
        if name == "ts":
            out["ts_state"] = state
    out["max_abs_ts"] = str(max_abs) if max_abs else "0"
    out["fractional"] = fractional
    return out


def _fill_declined(data, spans: np.ndarray, ints, valid, codes, uniques: list) -> Optional[tuple]:
    """Decode the events the scanner declined (rows left empty) with msgspec and fill their rows: the
    values as the msgspec path reads them, strings as their text, times as text for `decode` to convert.
    Items that are not events are removed. Returns (ints, valid, codes, skipped, dropped) or None when an
    item is not valid JSON (the caller decodes the whole range with msgspec, for its error message)."""
    try:
        events, dropped = _decode.decode_items([bytes(data[a:b]) for _, a, b in spans])
    except msgspec.DecodeError:
        return None
    ints, valid, codes = ints.copy(), valid.copy(), codes.copy()
    lookup: list[Optional[dict]] = [None] * len(uniques)

    def code_of(col: int, text: str) -> int:
        table = lookup[col]
        if table is None:
            table = lookup[col] = {t: i for i, t in enumerate(uniques[col])}
        if text not in table:
            table[text] = len(uniques[col])
            uniques[col].append(text)
        return table[text]

    junk = []
    times = {INT_FIELDS.index("ts"), INT_FIELDS.index("dur")}
    for (row, _, _), event in zip(spans, events):
        if event is _decode.NOT_EVENT:
            junk.append(row)
            continue
        args = event.args if event.args is not None else _decode._EMPTY_ARGS
        cells = {"ph": event.ph, "cat": event.cat, "name": event.name, "pid": event.pid, "tid": event.tid,
                 "ts": event.ts, "dur": event.dur, "flow": event.id, "name_arg": args.name}  # fmt: skip
        for i, f in enumerate(STR_FIELDS):
            text = _decode._as_text(cells[f] if f in cells else getattr(args, f))
            codes[i, row] = -1 if text is None else code_of(i, text)
        for i, f in enumerate(INT_FIELDS):
            v = cells[f] if f in cells else getattr(args, f)
            if i in times:
                if v is None:
                    ints[i, row], valid[i, row] = 0, 0
                elif isinstance(v, bool) or not isinstance(v, (int, str)):
                    ints[i, row], valid[i, row] = 0, 3
                else:
                    ints[i, row], valid[i, row] = (
                        code_of(len(STR_FIELDS), v if isinstance(v, str) else str(v)),
                        2,
                    )
            else:
                x = _decode._as_int(v)
                ints[i, row], valid[i, row] = (0, 0) if x is None else (x, 1)
    skipped = {}
    if junk:
        keep = np.ones(ints.shape[1], bool)
        keep[junk] = False
        ints, valid, codes = ints[:, keep], valid[:, keep], codes[:, keep]
        skipped[_decode.SKIP_NOT_EVENT] = len(junk)
    # The string columns' dictionaries in first-seen order of the rows (as the msgspec path builds
    # them), without the strings of fields a declined event's msgspec decode did not keep.
    for i in range(len(STR_FIELDS)):
        codes[i], uniques[i] = _decode.first_seen(codes[i], uniques[i])
    return ints, valid, codes, skipped, dict(dropped)


def _to_ns(milli: np.ndarray, unit: str) -> np.ndarray:
    """value × 1000 → int64 ns: as is when the numbers are µs; rounded half to even to an integer
    when they are ns (as `_decode.to_int64_ns` does)."""
    if unit == "ns":
        q, r = np.divmod(milli, 1000)  # floor division: 0 <= r < 1000
        return q + ((r > 500) | ((r == 500) & (q % 2 == 1)))
    return milli
