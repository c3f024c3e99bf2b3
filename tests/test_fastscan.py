"""The C scanner (tracekit/parse/_fastscan.c via parse/fast.py) against the msgspec decoder: identical tables.

The scanner may decline any chunk (then msgspec decodes it); what it accepts must decode exactly as the
msgspec path does, and whatever msgspec rejects it must decline."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.errors import TracekitError
from tracekit.parse import decode as _decode
from tracekit.parse import fast as _fast
from tracekit.parse.parser import parse_paths

pytestmark = pytest.mark.skipif(
    _fast._fastscan is None, reason="the C extension tracekit.parse._fastscan is not built (pip install -e .)"
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = (
    sorted((ROOT / "fixtures/hta").glob("*.json.gz"))
    + sorted((ROOT / "fixtures/h200_probe").glob("*.json.gz"))
    + sorted((ROOT / "fixtures/h200").glob("*/*.pt.trace.json*"))
)


@pytest.fixture
def msgspec_only(monkeypatch):
    """Within the block, decode with msgspec only."""

    class _Ctx:
        def __enter__(self):
            monkeypatch.setenv("TRACEKIT_DECODER", "msgspec")

        def __exit__(self, *exc):
            monkeypatch.delenv("TRACEKIT_DECODER")

    return _Ctx()


def slow_decode(data: bytes, unit: str):
    old = os.environ.get("TRACEKIT_DECODER")
    os.environ["TRACEKIT_DECODER"] = "msgspec"
    try:
        return _decode.decode_events(data, unit=unit)
    finally:
        if old is None:
            del os.environ["TRACEKIT_DECODER"]
        else:
            os.environ["TRACEKIT_DECODER"] = old


def assert_same(fast, slow) -> None:
    (fb, fs), (sb, ss) = fast, slow
    fs, ss = dict(fs), dict(ss)
    assert fb.schema == sb.schema
    for name in fb.schema.names:
        assert fb.column(name).equals(sb.column(name)), name
    assert Decimal(fs.pop("max_abs_ts")) == Decimal(ss.pop("max_abs_ts"))
    assert fs == ss


def events_of(path: Path) -> bytes:
    buf, _ = _decode.read_trace_bytes(path)
    return bytes(_decode.split_document(buf, path, salvage=False, gz_damage=None).events)


def test_fixtures_are_there():
    assert len(FIXTURES) >= 20


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_every_fixture_scans_and_matches_msgspec(path):
    data = events_of(path)
    for unit in ("us", "ns"):
        fast = _fast.decode(data, unit)
        assert fast is not None, f"{path}: the scanner declined a real trace"
        assert_same(fast, slow_decode(data, unit))


@pytest.mark.parametrize("path", FIXTURES[:3] + FIXTURES[-3:], ids=lambda p: p.name[:40])
def test_parse_paths_same_capture(path, msgspec_only):
    fast = parse_paths([path])
    with msgspec_only:
        slow = parse_paths([path])
    assert fast.table.equals(slow.table)
    assert fast.meta == slow.meta


def one(event, unit: str = "us"):
    """(fast, slow) decode of a one-event array (fast is None when declined)."""
    data = json.dumps([event]).encode() if not isinstance(event, bytes) else event
    return _fast.decode(data, unit), slow_decode(data, unit)


@pytest.mark.parametrize(
    "event",
    [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 1.5, "dur": 2},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "caf\u00e9 \u4e2d",
            "pid": 0,
            "tid": 0,
            "ts": -3.25,
            "dur": 0.001,
        },
        {"ph": "X", "cat": "cpu_op", "name": 'a"b\\c\n\t/', "pid": 1, "tid": 1, "ts": 0, "dur": 1},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "ts": 0, "args": {"name": "t \u00e9"}},
        {
            "ph": "X",
            "cat": "Trace",
            "name": "P",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 5,
            "dur": 1,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": "0",
            "tid": "0x1f",
            "ts": 5,
            "args": {"stream": "7"},
        },
        {"ph": "X", "cat": "kernel", "name": "k", "pid": " stream 7 ", "tid": "-12", "ts": 5},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "", "tid": "1e3", "ts": 5, "args": {"device": "x"}},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 1, "tid": 1, "ts": 9007199254740993.125, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": None},
        {"ph": "X", "cat": "cpu_op", "name": None, "pid": None, "tid": 1, "ts": 1, "dur": None},
        {"ph": "X", "cat": "cpu_op", "name": "n", "pid": 1, "tid": 1},  # no time: dropped
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 3,
            "args": {
                "Input Dims": [[2, 3], [3, [4, {"a": [True, False, None]}]], []],
                "Input type": ["float", "", "\u00e9\\u"],
                "External id": 9,
                "Concrete Inputs": {},
                "Sequence number": -1,
                "Fwd thread id": 0,
                "x": -0.0e-5,
            },
        },
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "args": {"Bytes": -5, "Device Id": 0}},
        {"ph": "s", "cat": "ac2g", "name": "f", "id": 9223372036854775807, "pid": 1, "tid": 1, "ts": 2},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": 2, "args": {"Group size": 2**40}},
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "s",
            "pid": 1,
            "tid": 1,
            "ts": 2,
            "args": {"cuda_sync_kind": "E"},
        },
    ],
)
def test_quirks_match(event):
    fast, slow = one(event)
    assert fast is not None
    assert_same(fast, slow)


def declined(data: bytes) -> int:
    """How many events the scanner left to msgspec (it accepted the array)."""
    out = _fast.scan(data)
    assert out is not None, "the scanner declined the whole array"
    return len(out[5]) // 24


@pytest.mark.parametrize(
    "text,events_left_to_msgspec",
    [
        (b'[{"ph": "X", "cat": "kernel", "ts": 1.2345}]', 0),  # more than three decimals: rounded
        (b'[{"ph": "X", "cat": "kernel", "ts": 5128440295499.2295, "dur": 0.0005}]', 0),  # float noise
        (b'[{"ph": "X", "cat": "kernel", "ts": 1e3, "dur": 2.5E-1}]', 0),  # exponents: as text
        (b'[{"ph": "X", "cat": "kernel", "ts": 1e400}]', 0),  # out of range: skipped, counted
        (b'[{"ph": "X", "cat": "kernel", "ts": 1e99999}]', 0),
        (b'[{"ph": "X", "cat": "kernel", "ts": "12"}]', 0),  # a string holding a number
        (b'[{"ph": "X", "cat": "kernel", "ts": "soon"}]', 0),  # not a number: skipped, counted
        (b'[{"ph": "X", "cat": "kernel", "ts": true}, {"ph": "X", "cat": "kernel", "ts": [1]}]', 0),
        (b'[{"ph": "X", "cat": "kernel", "ts": 1, "pid": 1.0, "tid": 1.5, "id": 1e3}]', 0),
        (b'[{"ph": "X", "cat": "kernel", "pid": 99999999999999999999, "ts": 1}]', 0),
        (b'[{"ph": "X", "cat": "kernel", "pid": true, "tid": {"a": 1}, "ts": 1}]', 0),
        (b'[{"ph": "X", "cat": "kernel", "ts": 1, "dur": -3}]', 0),  # negative dur: skipped, counted
        (b'[{"ph": 1, "ts": 1}]', 1),  # a non-string phase is written as JSON text
        (b'[{"ph": "X", "ph": "B", "ts": 1}]', 1),  # duplicated key: the last wins
        (b'[{"p\\u0068": "X", "ts": 1}]', 1),  # escaped key
        (b'[{"ph": "X", "args": [], "ts": 1}]', 1),  # args not an object: dropped, counted
        (b'[{"ph": "X", "ts": 1}, 5, "x", [1]]', 3),  # items that are not events: skipped, counted
        (b'[{"ph": "\\ud83d\\ude00", "ts": 1}]', 0),  # a surrogate pair
        # an op's input shapes: the array's text as written, spaces and nesting kept; null is none
        (b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Input Dims": [[64, 3, 224, 224], [], [1]]}}]', 0),
        (b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Input Dims": [[2,3],[ ]] }}]', 0),
        (b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Input Dims": null}}]', 0),
        (b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Input Dims": [[1], ["a\\"b"]]}}]', 0),
        (b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Input Dims": "[[1]]"}}]', 1),  # not an array
        (b'[{"ph": "X", "cat": "cpu_op", "ts": 1, "args": {"Input Dims": [["\xc3\xa9"]]}}]', 1),  # non-ASCII
    ],
)
def test_odd_values_and_events_decode_as_msgspec_does(text, events_left_to_msgspec):
    """An odd value costs that value (read as text, converted by the msgspec path's rules), an odd event
    that event (decoded by msgspec into its row): never the whole array."""
    assert declined(text) == events_left_to_msgspec
    fast, slow = one(text)
    assert fast is not None
    assert_same(fast, slow)


@pytest.mark.parametrize(
    "text",
    [
        b'[{"ph": "X", "ts": 1},]',
        b'[{"ph": "X", "ts": 01}]',
        b'[{"ph": "X", "ts": 1}] x',
        b'[{"ph": "X\x01", "ts": 1}]',
        b'[{"ph": "X\xff", "ts": 1}]',
        b'[{"ph": "X", "x": [1, 2}, "ts": 1}]',
        b'[{"ph": "X", "x": "\\q", "ts": 1}]',
        b'[{"ph": "X", "x": tru, "ts": 1}]',
        b'[{"ph": "X", "x": "\\ud800", "ts": 1}]',  # a lone surrogate
        b'[{"ph": "X", "ts": 1',
        b'[{"ph": "X", "ts": 1}, {"ph": 1, "x": [}]',  # invalid inside an event it would decline
    ],
)
def test_declines_what_is_not_valid_json(text):
    assert _fast.decode(text, "us") is None
    with contextlib.suppress(TracekitError):
        _decode.decode_events(text)  # the caller's fallback decides


FLOAT_NOISE = [
    "5128440295499.2295",  # the example: rounds down
    "5128440295499.2296",
    "1.0005",  # a tie: to even (1.000)
    "1.0015",  # a tie: to even (1.002)
    "1.00050000000000000001",  # not a tie: up
    "0.9995",  # carries into the integer part
    "-0.0005",
    "-2.0025",
    "9223372036854775.8065",  # rounds to the largest int64 ns
    "9223372036854775.8075",  # rounds past it: out of range
    "-9223372036854775.8085",
    "12.0" + "0" * 36 + "1",  # 40 decimals
    "12.0" + "0" * 37 + "1",  # 41: read as text
    "1712195495519689.0470000001",
]


@pytest.mark.parametrize("ts", FLOAT_NOISE)
@pytest.mark.parametrize("unit", ["us", "ns"])
def test_float_noise_times(ts, unit):
    """Any number of decimals, rounded half to even to the ns as the msgspec path does (Decimal), in
    the scanner itself: no event and no chunk goes to msgspec for it."""
    text = f'[{{"ph": "X", "cat": "kernel", "ts": {ts}, "dur": {ts.lstrip("-")}}}]'.encode()
    assert declined(text) == 0
    fast, slow = one(text, unit)
    assert_same(fast, slow)
    exact = Decimal(ts).quantize(Decimal("0.001"), rounding="ROUND_HALF_EVEN")
    if unit == "us" and -(2**63) <= exact * 1000 < 2**63:
        assert fast[0].column("ts_ns").to_pylist() == [int(exact * 1000)]


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")), deadline=None)
@given(
    st.integers(-(10**16), 10**16),
    st.text("0123456789", min_size=1, max_size=45),
    st.sampled_from(["us", "ns"]),
)
def test_random_decimals(whole, digits, unit):
    ts = f"{whole}.{digits}"
    text = f'[{{"ph": "X", "cat": "cpu_op", "ts": {ts}, "dur": {ts}}}, {{"ph": "i", "ts": 1}}]'.encode()
    fast, slow = one(text, unit)
    assert fast is not None
    assert_same(fast, slow)


def test_integer_ns_trace_stays_in_the_scanner(tmp_path, msgspec_only):
    """Integer ns timestamps (1.7e18, too large for value × 1000) come back as integers, not text, and a
    trace of them parses alike on both decoders (time unit ns)."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "op",
            "pid": 1,
            "tid": 1,
            "ts": 1_712_195_495_519_689_047 + i,
            "dur": 5,
        }
        for i in range(50)
    ]
    data = json.dumps(events).encode()
    ts_valid = _fast.scan(data)[2][2]
    assert set(ts_valid) == {4}
    for unit in ("us", "ns"):
        assert_same(*one(data, unit))
    trace = tmp_path / "ns.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    fast = parse_paths([trace])
    with msgspec_only:
        slow = parse_paths([trace])
    assert fast.traces[0]["time_unit"] == "ns"
    assert fast.table.equals(slow.table) and fast.meta == slow.meta


DEEP = 100_000


@pytest.mark.parametrize(
    "event",
    [
        b'{"ph": "X", "cat": "cpu_op", "name": "n", "ts": 1, "args": {"deep": %s}}',
        b'{"ph": "X", "cat": "cpu_op", "name": "n", "ts": 1, "args": {"name": %s}}',
        b'{"ph": "X", "cat": "cpu_op", "name": %s, "ts": 1}',
        b'{"ph": "X", "cat": "cpu_op", "name": "n", "ts": 1, "x": [{"y": %s}]}',
        b"%s",
    ],
)
def test_deeply_nested_values(event, msgspec_only):
    """100,000 levels of [[[...]]]: the event is kept, the deep value dropped (null) and counted; never a
    RecursionError. Values up to MAX_DEPTH levels are kept as they are."""
    plain = b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 0}'
    for depth, dropped in ((DEEP, 1), (700, 0), (300, 0), (_decode.MAX_DEPTH - 3, 0)):
        value = b"[" * depth + b"]" * depth
        text = b"[" + plain + b", " + (event % value) + b", " + plain + b"]"
        fast, slow = one(text)
        assert fast is not None
        assert_same(fast, slow)
        stats = fast[1]
        if event == b"%s":  # an item that is not an object
            assert stats["skipped"] == {_decode.SKIP_NOT_EVENT: 1}
            continue
        assert fast[0].num_rows == 3
        assert stats["values_dropped"] == ({_decode.DROP_TOO_DEEP: 1} if dropped else {})
        with msgspec_only:
            assert_same(_decode.decode_events(text), slow)


def test_a_value_too_deep_for_json_text_has_none():
    """A kept string field holding a list nested close to the recursion limit (msgspec took it, json's
    encoder would not): null, the same in both decoders since both call this."""
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert _decode._as_text(deep) is None
    assert _decode._as_text([1, [2.5, "x"]]) == '[1, [2.5, "x"]]'


def test_declined_events_keep_row_order_and_dictionary_order():
    """Strings first seen in a declined event come first in the column's dictionary, as msgspec's
    dictionary_encode orders them; strings read before the scanner declined an event do not linger."""
    events = [
        b'{"ph": "X", "cat": "cpu_op", "name": "seen-then-dropped", "ts": 1, "name": ["odd"]}',
        b'{"ph": "X", "cat": "kernel", "name": "k1", "ts": 2}',
        b'{"ph": "X", "cat": "gpu_memcpy", "name": 7, "ts": 3, "args": "x"}',
        b'{"ph": "X", "cat": "kernel", "name": "k1", "ts": 4}',
        b"17",
        b'{"ph": "X", "cat": "new", "name": "k2", "ts": 5}',
    ]
    text = b"[" + b", ".join(events) + b"]"
    assert declined(text) == 3
    fast, slow = one(text)
    assert_same(fast, slow)
    assert fast[0].column("name").to_pylist() == ['["odd"]', "k1", "7", "k1"]
    assert fast[1]["skipped"] == {_decode.SKIP_NOT_EVENT: 1}
    # the kernels and the copy have no dur: read as 0, and counted (parse warns)
    assert fast[1]["values_dropped"] == {_decode.DROP_ARGS_NOT_OBJECT: 1, _decode.DROP_DEVICE_DUR: 3}


def test_ns_unit_rounds_half_to_even():
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": t, "dur": 1}
        for t in (2.5, 3.5, -2.5, 7.499)
    ]
    fast, slow = one(json.dumps(events).encode(), "ns")
    assert fast[0].column("ts_ns").to_pylist() == [2, 4, -2, 7]
    assert_same(fast, slow)


def test_empty_and_null_items():
    for text in (b"[]", b" [ null , null ] ", b'[null, {"ph": "X", "cat": "kernel", "ts": 1}, null]'):
        fast, slow = one(text)
        assert fast is not None
        assert_same(fast, slow)


def test_decoder_name():
    assert _fast.decoder_name().startswith("C scanner")
    os.environ["TRACEKIT_DECODER"] = "msgspec"
    try:
        assert _fast.decoder_name() == "msgspec"
        assert _fast.decode(b"[]", "us") is None
    finally:
        del os.environ["TRACEKIT_DECODER"]


# ---------------------------------------------------------------------------------------------------
# Differential fuzzing: random events and random byte edits

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(places=3, min_value=-(10**16), max_value=10**16).map(lambda d: float(d))
    | st.text(max_size=6)
    | st.sampled_from(["0x1f", "Spans", " 7", "1.5", "1.", "", "\u00e9", "\ud800"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
ARG_KEYS = st.sampled_from(
    [
        "device",
        "stream",
        "correlation",
        "External id",
        "external id",
        "Sequence number",
        "Bytes",
        "name",
        "Collective name",
        "Process Group Ranks",
        "cuda_sync_kind",
        "Group size",
        "Input Dims",
        "other",
    ]
)
TOP = {
    "ph": st.sampled_from(["X", "i", "s", "f", "M", "C"]) | SCALARS,
    "cat": st.sampled_from(["kernel", "cpu_op", "Kernel", "ac2g", "gpu_memcpy"]) | SCALARS,
    "name": st.sampled_from(["k", "[memory]", "thread_name", "process_name"]) | SCALARS,
    "pid": st.integers(-5, 5) | SCALARS,
    "tid": st.integers(-5, 5) | SCALARS,
    "ts": st.decimals(places=3, min_value=-(10**13), max_value=10**13).map(float)
    | st.floats(0, 6e12)  # float noise: a shifted µs time as a double prints up to 17 digits
    | SCALARS,
    "dur": st.integers(0, 100) | st.floats(-1, 1e4) | SCALARS,
    "id": st.integers(0, 9) | SCALARS,
    "args": st.none()
    | st.dictionaries(ARG_KEYS, st.integers(-9, 9) | st.text(max_size=4) | VALUES, max_size=4),
    "other": VALUES,
}
EVENT = st.fixed_dictionaries({}, optional=TOP)
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def check(data: bytes) -> None:
    fast = _fast.decode(data, "us")
    try:
        slow = slow_decode(data, "us")
    except TracekitError:
        assert fast is None, "the scanner accepted what msgspec rejects"
        return
    if fast is not None:
        assert_same(fast, slow)


@FUZZ
@given(st.lists(st.none() | EVENT, max_size=5), st.integers(0, 2))
def test_random_events(events, indent):
    check(
        json.dumps(events, indent=indent or None, ensure_ascii=bool(indent % 2)).encode(
            "utf-8", "surrogatepass"
        )
    )


def _base() -> bytes:
    t = TraceBuilder(rank=0)
    t.step(1, 0, 100.5)
    t.op("aten::mm", 10.25, 20)
    t.launch(12, 5, corr=1)
    t.kernel("gemm", 30, 40.125, corr=1)
    t.memory(80, 512, 1024)
    return json.dumps(t.build()["traceEvents"], indent=1).encode()


BASE = _base()


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(0, len(BASE) - 1), st.binary(min_size=0, max_size=3)), min_size=1, max_size=3
    )
)
def test_random_byte_edits(edits):
    data = bytearray(BASE)
    for pos, new in edits:
        data[pos : pos + 1] = new
    check(bytes(data))


def test_real_trace_cut_at_an_event():
    text = gzip.decompress((ROOT / "fixtures/h200_probe/tiny.pt.trace.json.gz").read_bytes())
    start = text.index(b"[", text.index(b'"traceEvents"'))
    cut = text.index(b"}\n  },\n  {", start + 5000) + 5
    data = text[start:cut] + b"]"
    assert _fast.decode(data, "us") is not None
    check(data)


@pytest.mark.parametrize(
    "inner",
    [
        b"",
        b"  ",
        b'{"ph": "X", "ts": 1}',
        b' {"ph": "X", "ts": 1} , null ',
        b'{"ph": "X", "ts": 1},',
        b"{}]",
        b",{}",
    ],
)
def test_bare_range_is_the_wrapped_array(inner):
    """scan(buf, start, stop, bare=True) reads buf[start:stop] as if it were wrapped in brackets."""
    buf = b"xx" + inner + b"yy"
    bare = _fast.decode(buf, "us", 2, 2 + len(inner), bare=True)
    wrapped = _fast.decode(b"[" + inner + b"]", "us")
    assert (bare is None) == (wrapped is None)
    if bare is not None:
        assert_same(bare, wrapped)


def test_a_time_written_with_more_digits_than_decimal128_holds():
    """Found by hypothesis: Arrow's string cast read "0.001" + 39 zeros as 0 (the scanner: 1 ns)."""
    ts = "0.001" + "0" * 39
    text = f'[{{"ph": "X", "cat": "cpu_op", "ts": {ts}, "dur": {ts}}}, {{"ph": "i", "ts": 1}}]'.encode()
    fast, slow = one(text, "us")
    assert slow[0].column("dur_ns").to_pylist()[0] == 1
    assert_same(fast, slow)


@pytest.mark.parametrize("ts", [3.401823669209385e38, 1.5e20, 2.5e-7, 1e34])
def test_a_time_with_an_exponent_agrees(ts):
    """Found by hypothesis: Arrow's string cast read 3.401823669209385e+38 as
    99999999999963463374607431768211456 (out of range: the scanner counts nothing)."""
    check(json.dumps([{"ph": "X", "name": "k", "cat": None, "ts": ts}]).encode())


def test_short_events_outgrow_the_first_block_and_still_match_msgspec():
    """GIVEN more events than the scanner's first block has rows for (it guesses one per 256 bytes
    of input, plus 1024: these are ~60 bytes each, with nulls, missing keys and a declined event among
    them) WHEN scanned THEN the block grows, the rows come back copied out of it, and every column
    equals the msgspec decode's; and the cells of nulls (left uncleared) never show as values."""
    events = []
    for i in range(20_000):
        e = {"ph": "X", "cat": "kernel", "ts": i, "dur": 1}
        if i % 3 == 0:
            e["args"] = {"device": i % 8, "stream": None}
        if i % 7 == 0:
            e["pid"] = i
        events.append(e)
    events.append({"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "name": 5})  # declined: name not a str
    data = json.dumps(events, separators=(",", ":")).encode()
    assert len(events) > len(data) // 256 + 1024  # more rows than the first block holds
    out = _fast.scan(data)
    assert out is not None and out[0] == len(events)
    assert len(out[5]) // 24 == 1
    for unit in ("us", "ns"):
        fast = _fast.decode(data, unit)
        assert fast is not None
        assert_same(fast, slow_decode(data, unit))


def test_the_columns_of_long_events_do_not_keep_a_mostly_empty_block():
    """GIVEN events of ~1 KB (the first block has a row per 256 bytes: 4x what they need) WHEN scanned
    THEN the columns come back in bytes of at most 4/3 of their rows (the block is copied, not kept
    alive by the table's arrays), and they equal msgspec's decode."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}" + "x" * 900, "pid": 1, "tid": 2, "ts": i, "dur": 1}
        for i in range(5000)
    ]
    data = json.dumps(events).encode()
    out = _fast.scan(data)
    assert out is not None and out[0] == len(events)
    block = out[1]
    while getattr(block, "base", None) is not None:
        block = block.base
    row_bytes = len(_fast.INT_FIELDS) * 9 + len(_fast.STR_FIELDS) * 4
    assert len(block) <= row_bytes * len(events) * 4 / 3
    assert_same(_fast.decode(data, "us"), slow_decode(data, "us"))
