"""Chrome "duration events": a `B` (begin) and an `E` (end) event per span instead of one complete `X`
event with its `dur`. Kineto writes `X` events only; `B`/`E` come from other Chrome-trace writers
(Chromium's own tracing, TRACE_EVENT_BEGIN/END; hand-written instrumentation; tools that convert or
merge traces). Per the Chrome trace format an `E` closes the latest `B` still open on its thread (pid,
tid), so they nest like a stack. The parser pairs them into the complete events the rest of tracekit
reads (`pair`): the `B` row becomes an `X` row lasting until its `E`, the `E` row goes. Unpaired ones are
skipped and counted (a `B` never closed: the trace was cut; an `E` with nothing open). They used to be
dropped silently: one step, everything "interpreter".

Pairing needs the whole file (a span may begin in one chunk and end in another), so a file that holds
any is decoded again as a whole (tracekit.parse.parser, the `pair` plan).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracekit.data import arrow as _arrow
from tracekit.parse.derive import Frame

SKIP_UNCLOSED = "B event never closed by an E"
SKIP_UNOPENED = "E event without an open B"
PHASES = ("B", "E")


def pair(table: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """`table` (decoded events of one file, in file order) with each B/E pair made one X row; the counts
    of the B and E rows left out, by reason."""
    frame = Frame(table)
    is_b = frame.mask("ph", lambda v: v == "B")
    is_e = frame.mask("ph", lambda v: v == "E")
    rows = np.flatnonzero(is_b | is_e)
    if not rows.size:
        return table, {}
    pid, tid, ts = frame.ints("pid")[rows], frame.ints("tid")[rows], frame.ints("ts_ns")[rows]
    order = rows[np.lexsort((rows, ts, tid, pid))]  # by thread, then time, then file order
    begin = is_b[order]
    thread = np.stack([frame.ints("pid")[order], frame.ints("tid")[order]], axis=1)
    cut = np.flatnonzero(np.r_[True, (thread[1:] != thread[:-1]).any(axis=1), True])
    level = np.zeros(order.size, np.int64)  # a B: the depth it opens; an E: the depth it closes (0: none)
    for a, b in zip(cut[:-1], cut[1:]):
        step = np.where(begin[a:b], 1, -1)
        walk = np.cumsum(step)
        # the depth never goes below 0: an E with nothing open is ignored (D = S - min(0, min S so far))
        depth = walk - np.minimum(np.minimum.accumulate(walk), 0)
        before = np.r_[0, depth[:-1]]
        level[a:b] = np.where(begin[a:b], depth, before)
    group = np.repeat(np.arange(cut.size - 1), np.diff(cut))
    # Within a thread and a depth, events alternate: the B that opens it, the E that closes it, ...
    by_level = np.lexsort((np.arange(order.size), level, group))
    g, lv, bg = group[by_level], level[by_level], begin[by_level]
    closes = (bg[:-1] & ~bg[1:]) & (g[:-1] == g[1:]) & (lv[:-1] == lv[1:]) & (lv[:-1] > 0)
    b_at = order[by_level[:-1][closes]]
    e_at = order[by_level[1:][closes]]
    paired_b = np.zeros(table.num_rows, bool)
    paired_b[b_at] = True
    paired_e = np.zeros(table.num_rows, bool)
    paired_e[e_at] = True
    all_ts = frame.ints("ts_ns")
    dur = frame.ints("dur_ns").copy()
    dur[b_at] = all_ts[e_at] - all_ts[b_at]
    ph = np.asarray(frame.strings("ph", np.arange(table.num_rows)), dtype=object)
    ph[paired_b] = "X"
    out = table.set_column(
        table.schema.get_field_index("ph"),
        table.schema.field("ph"),
        pa.array(ph, pa.string()).dictionary_encode().cast(table.schema.field("ph").type),
    )
    out = out.set_column(
        table.schema.get_field_index("dur_ns"),
        table.schema.field("dur_ns"),
        pa.array(dur, table.schema.field("dur_ns").type),
    )
    drop = (is_b & ~paired_b) | is_e
    counts = {SKIP_UNCLOSED: int((is_b & ~paired_b).sum()), SKIP_UNOPENED: int((is_e & ~paired_e).sum())}
    return _arrow.filter_rows(out, ~drop), {k: v for k, v in counts.items() if v}
