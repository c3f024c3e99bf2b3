"""The optional C decoder: `tracekit/parse/_fastscan.c` scans a JSON array of events into columns directly.

`decode(data, unit)` returns what `_decode.decode_events` returns, or None when the scanner declined
the input (a value of an unexpected type, an escaped key, invalid JSON, ...): the caller then decodes it
with msgspec, which handles every case and produces the precise errors. Both paths build the batch with
`_decode.assemble`, so the same rules apply. Without the compiled extension (a failed build), or with
TRACEKIT_DECODER=msgspec, `decode` always returns None.
"""

from __future__ import annotations

import decimal
import os
from typing import Optional

import numpy as np
import pyarrow as pa

from tracekit.parse import decode as _decode
from tracekit.parse.decode import INT_ARGS

try:
    from tracekit.parse import _fastscan
except ImportError:  # the extension did not build: msgspec only
    _fastscan = None

# Column order of the scanner's output (tracekit/parse/_fastscan.c, enums I_* and S_*).
INT_FIELDS = ("pid", "tid", "ts", "dur", "flow") + INT_ARGS
STR_FIELDS = ("ph", "cat", "name", "sync_kind", "collective", "pg_ranks", "name_arg")


def available() -> bool:
    """Whether the C decoder is compiled and enabled (TRACEKIT_DECODER=msgspec turns it off)."""
    return _fastscan is not None and os.environ.get("TRACEKIT_DECODER", "") != "msgspec"


def decoder_name() -> str:
    """'C scanner (tracekit.parse._fastscan)' or 'msgspec': which decoder parses traces here."""
    return "C scanner (tracekit.parse._fastscan)" if available() else "msgspec"


def scan(data, start: int = 0, stop: int = -1, bare: bool = False) -> Optional[tuple]:
    """The raw scanner output for the JSON array of events data[start:stop] (with `bare`, the text
    between its brackets), or None (declined, or no extension)."""
    if not available():
        return None
    return _fastscan.scan(data, start, stop, bare)


def decode(
    data, unit: str, start: int = 0, stop: int = -1, bare: bool = False
) -> Optional[tuple[pa.RecordBatch, dict]]:
    """Like `_decode.decode_events(data[start:stop], unit=unit)` (with `bare`: of "[" + data[start:stop]
    + "]", without copying it), or None: decode this one with msgspec."""
    out = scan(data, start, stop, bare)
    if out is None:
        return None
    n, ints_buf, valid_buf, codes_buf, uniques = out
    if n == 0:
        return _decode._empty(), _decode._no_stats()
    ints = np.frombuffer(ints_buf, np.int64).reshape(len(INT_FIELDS), n)
    valid = np.frombuffer(valid_buf, np.uint8).reshape(len(INT_FIELDS), n)
    codes = np.frombuffer(codes_buf, np.int32).reshape(len(STR_FIELDS), n)
    coerced = None

    def int_col(i: int) -> tuple[np.ndarray, np.ndarray]:
        nonlocal coerced
        v = valid[i]
        texts = v == 2
        if not texts.any():
            return ints[i], v == 1
        # Strings where an integer is kept ("Spans", "0x0", "stream 7"): the msgspec path's coercion.
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
    ts, dur = ints[fields["ts"]], ints[fields["dur"]]
    ts_ok, dur_ok = valid[fields["ts"]] == 1, valid[fields["dur"]] == 1
    # The scanner gives value × 1000 exactly (at most three decimals, |value × 1000| < 2**63).
    max_milli = int(np.abs(ts[ts_ok]).max()) if ts_ok.any() else 0
    max_abs_ts = str(decimal.Decimal(max_milli).scaleb(-3)) if max_milli else "0"
    fractional = bool((ts[ts_ok] % 1000).any() or (dur[dur_ok] % 1000).any())
    strings = {f: (codes[i], uniques[i]) for i, f in enumerate(STR_FIELDS)}
    return _decode.assemble(
        n,
        ph=strings["ph"],
        cat=strings["cat"],
        name=strings["name"],
        ts_ns=(_to_ns(ts, unit), ts_ok),
        dur_ns=(_to_ns(dur, unit), dur_ok),
        ints={f: int_col(fields[f]) for f in ("pid", "tid", "flow", *_decode.INT_ARGS)},
        texts={
            "sync_kind": strings["sync_kind"],
            "collective": strings["collective"],
            "pg_ranks": strings["pg_ranks"],
            "name": strings["name_arg"],
        },
        max_abs_ts=max_abs_ts,
        fractional=fractional,
    )


def _to_ns(milli: np.ndarray, unit: str) -> np.ndarray:
    """value × 1000 → int64 ns: as is when the numbers are µs; rounded half to even to an integer
    when they are ns (as `_decode.to_int64_ns` does)."""
    if unit == "ns":
        q, r = np.divmod(milli, 1000)  # floor division: 0 <= r < 1000
        return q + ((r > 500) | ((r == 500) & (q % 2 == 1)))
    return milli
