"""The derived rows (tracekit/parse/derive.py) and the interval algebra of the dispatch gaps
(tracekit/analysis/dispatch.py): property tests against brute force, and real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis.dispatch import clip_to_windows, start_order
from tracekit.analysis.intervals import union
from tracekit.parse.derive import DERIVE_COLUMNS, Frame, FrameBuilder, derive_steps, needed_for_derive
from tracekit.parse.parser import parse_paths
from tracekit.parse.sanity import check_rank

ROOT = Path(__file__).resolve().parent.parent

INTERVALS = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=12)


def covered(intervals) -> set[int]:
    return {t for s, e in intervals for t in range(s, e)}


@settings(max_examples=200, deadline=None)
@given(INTERVALS)
def test_union_is_maximal_disjoint_and_covers_the_same_points(raw):
    raw = [(s, s + d) for s, d in raw]  # any order; empty ones cover nothing
    starts = np.array([s for s, _ in raw], dtype=np.int64)
    ends = np.array([e for _, e in raw], dtype=np.int64)
    us, ue = union(starts, ends)
    pieces = list(zip(us.tolist(), ue.tolist()))
    assert covered(pieces) == covered(raw)
    assert all(s < e for s, e in pieces)
    assert all(e1 < s2 for (_, e1), (s2, _) in zip(pieces, pieces[1:]))  # disjoint, not even touching


@settings(max_examples=200, deadline=None)
@given(INTERVALS, INTERVALS, st.booleans())
def test_clip_to_windows_is_the_pairwise_intersection(raw, wins, disjoint):
    gaps = [(s, s + d) for s, d in raw if d > 0]
    windows = [(s, s + d) for s, d in wins]
    if disjoint:  # the usual case: consecutive ProfilerStep windows
        windows, t = [], 0
        for s, d in wins:
            windows.append((t + s, t + s + d))
            t += s + d
        windows = windows[::-1]  # given in any order
    gs = np.array([g[0] for g in gaps], dtype=np.int64)
    ge = np.array([g[1] for g in gaps], dtype=np.int64)
    ws = np.array([w[0] for w in windows], dtype=np.int64)
    we = np.array([w[1] for w in windows], dtype=np.int64)
    s, e, w = clip_to_windows(gs, ge, ws, we)
    want = sorted(
        (max(a, c), min(b, d), k)
        for a, b in gaps
        for k, (c, d) in enumerate(windows)
        if min(b, d) > max(a, c)
    )
    assert sorted(zip(s.tolist(), e.tolist(), w.tolist())) == want
    assert list(zip(s.tolist(), w.tolist())) == sorted(zip(s.tolist(), w.tolist()))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 12), st.integers(-2, 6)),
        max_size=30,
    ),
    st.booleans(),
)
def test_start_order_is_lexsort(rows, presorted):
    """start_order (argsort + fix-ups) orders exactly as np.lexsort by (groups, start, longer first),
    ties in input order, on sorted and unsorted input, with and without group keys."""
    if presorted:
        rows = sorted(rows, key=lambda r: r[2])
    g1 = np.array([r[0] for r in rows], dtype=np.int64)
    g2 = np.array([r[1] for r in rows], dtype=np.int64)
    starts = np.array([r[2] for r in rows], dtype=np.int64)
    ends = starts + np.array([r[3] for r in rows], dtype=np.int64)
    assert start_order(starts, ends).tolist() == np.lexsort((starts - ends, starts)).tolist()
    want = np.lexsort((starts - ends, starts, g2, g1)).tolist()
    assert start_order(starts, ends, g1, g2).tolist() == want


@pytest.mark.parametrize(
    "files",
    [
        ["fixtures/h200_probe/sync.pt.trace.json.gz"],
        ["fixtures/hta/triton_example.json.gz"],  # no ProfilerStep: one step over the trace
        ["fixtures/hta/sampled_rank-0.json.gz", "fixtures/hta/sampled_rank-1.json.gz"],
    ],
)
def test_the_streamed_subset_derives_the_same_rows(files):
    """parse_to_file keeps only needed_for_derive(events) in memory: it must derive the same step rows
    and the sanity checks must say the same of it, rank by rank."""
    capture = parse_paths([ROOT / f for f in files])
    t = capture.table
    events = t.filter(pc.equal(t.column("kind").cast("string"), "event"))
    full = derive_steps(events)
    subset = needed_for_derive(events)
    assert subset.num_rows < events.num_rows
    assert derive_steps(subset).to_pylist() == full.to_pylist()
    for r in set(events.column("rank").to_pylist()):
        mine, steps = (x.filter(pc.equal(x.column("rank"), r)) for x in (events, full))
        assert check_rank(needed_for_derive(mine), steps, "t") == check_rank(mine, steps, "t")


def _piece(rng, n: int, names: list[str]) -> pa.Table:
    """A derive-subset-shaped table of `n` random rows: nullable ints, dictionary strings with nulls,
    in two chunks with dictionaries of their own (as a chunk's table after IPC may hold)."""
    from tracekit.data import arrow as A
    from tracekit.data.schema import SCHEMA

    def chunk(m: int) -> pa.RecordBatch:
        arrays = []
        for c in DERIVE_COLUMNS:
            f = SCHEMA.field(c)
            if pa.types.is_dictionary(f.type):
                uniq = list(rng.choice(names, size=rng.integers(1, len(names) + 1), replace=False))
                codes = rng.integers(-1, len(uniq), m)
                arrays.append(A.dictionary(codes, uniq))
            else:
                ok = rng.random(m) > (0.3 if c in ("device", "correlation") else 0.0)
                arrays.append(A.from_numpy(rng.integers(-(10**6), 10**6, m), ok, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([SCHEMA.field(c) for c in DERIVE_COLUMNS]))

    a = int(rng.integers(0, n + 1))
    return pa.Table.from_batches([chunk(a), chunk(n - a)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), max_size=12), st.integers(0, 2**32 - 1))
def test_a_frame_built_piece_by_piece_equals_the_frame_of_the_whole_table(sizes, seed):
    """FrameBuilder (a streamed parse's derive subsets, added chunk by chunk and let go) reads as the
    Frame of their concatenation: ints, presence, string masks and values, and the table it makes."""
    rng = np.random.default_rng(seed)
    names = ["ProfilerStep#1", "aten::mm", "cudaLaunchKernel", "X", "kernel", ""]
    pieces = [_piece(rng, n, names) for n in sizes]
    builder = FrameBuilder()
    for p in pieces:
        builder.add(p)
    built = builder.frame()
    if not pieces:
        assert built.num_rows == 0 and built.table.column_names == list(DERIVE_COLUMNS)
        return
    whole = Frame(pa.concat_tables(pieces))
    assert built.num_rows == whole.num_rows == sum(sizes)
    for c in ("rank", "pid", "tid", "ts_ns", "dur_ns", "device", "correlation"):
        np.testing.assert_array_equal(built.ints(c), whole.ints(c))
        np.testing.assert_array_equal(built.present(c), whole.present(c))
    rows = np.arange(built.num_rows)[::7]
    for c in ("ph", "cat", "name"):
        for v in names:
            same = v.__eq__
            np.testing.assert_array_equal(built.mask(c, same), whole.mask(c, same))
        assert built.strings(c, rows) == whole.strings(c, rows)
    assert built.table.to_pylist() == whole.table.to_pylist()
