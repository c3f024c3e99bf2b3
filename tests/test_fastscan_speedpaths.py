"""The C scanner's fast paths (tracekit/parse/_fastscan.c) against the msgspec decoder, on inputs made to hit
their edges: the predicted next key (a template of the bytes from a key's quote to its value), the hashed
key lookup, the 8-digit number parser, the recent-codes cache of the string dictionaries and the lazily
null-filled output columns. Each case either decodes exactly as msgspec does or is declined."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_fastscan import EVENT, FUZZ, assert_same, check, declined, slow_decode
from tracekit.parse import fast as _fast

pytestmark = pytest.mark.skipif(
    _fast._fastscan is None, reason="the C extension tracekit.parse._fastscan is not built (pip install -e .)"
)


def same(data: bytes, unit: str = "us") -> None:
    """The scanner accepts data and decodes it exactly as msgspec does."""
    fast = _fast.decode(data, unit)
    assert fast is not None, "the scanner declined"
    assert_same(fast, slow_decode(data, unit))


def ev(**kw) -> dict:
    base = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}
    base.update(kw)
    return base


def dumps(events, indent=None) -> bytes:
    return json.dumps(events, indent=indent).encode()


# --- keys: near misses of kept keys, in the predicted position and outside it ----------------------

NEAR_MISSES = [
    # (kept key, a key of the same length with the same first and last byte / first 8 bytes)
    ("pid", "pad"),
    ("ts", "tz"),
    ("cat", "cot"),
    ("name", "nome"),
    ("args", "aths"),
    ("External id", "External Xd"),
    ("External id", "external id"),  # also kept: a different column
    ("Sequence number", "Sequence numbeR"),
    ("Process Group Ranks", "Process Group RankZ"),
    ("Python parent id", "Python parent iD"),
    ("correlation", "correlatiox"),
]


@pytest.mark.parametrize("kept,other", NEAR_MISSES, ids=lambda k: k.replace(" ", "_"))
@pytest.mark.parametrize("indent", [None, 2])
def test_near_miss_keys_after_a_learned_layout(kept, other, indent):
    """Events teach the scanner a key order; then the same position holds a key that differs from the
    expected one in a single byte: it must be read (and kept or skipped) by its own text."""
    top = kept in ("pid", "ts", "cat", "name", "args")

    def with_key(key, value):
        if top:
            e = ev()
            e.pop(kept, None)
            e[key] = value
            return e
        return ev(args={"a": 1, key: value, "z": 2})

    value = "v" if kept in ("cat", "name", "Process Group Ranks") else 7
    if kept == "args":
        value = {"External id": 3}
    events = [with_key(kept, value) for _ in range(3)]
    events += [with_key(other, value), with_key(kept, value), with_key(other, value)]
    same(dumps(events, indent))


def test_predicted_key_then_more_whitespace():
    """A key's template ends at its value; more whitespace before the value still parses."""
    text = b'[{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts":   3, "dur":\n 4}, {"ph":"X","ts":5,"dur":6}]'
    same(text)


def test_duplicated_key_through_a_predicted_key_is_declined():
    """The first event teaches 'ph' after 'zz'; in the second that prediction hits on a second 'ph': that
    event goes to msgspec (the last value wins), the others stay with the scanner."""
    text = b'[{"zz": 1, "ph": "X", "ts": 1}, {"ph": "X", "zz": 1, "ph": "Y", "ts": 2}]'
    assert declined(text) == 1
    same(text)
    args = (
        b'[{"ts": 1, "args": {"q": 0, "stream": 7}}, {"ts": 1, "args": {"stream": 7, "q": 0, "stream": 8}}]'
    )
    assert declined(args) == 1
    same(args)


def test_key_prefix_of_the_predicted_key():
    """The input holds a key that starts like the expected one ('"name"' vs '"names"')."""
    events = [ev(), ev()]
    renamed = ev()
    renamed["names"] = renamed.pop("name")
    same(dumps(events + [renamed] + events))


def test_empty_and_long_keys():
    long_key = "k" * 40
    events = [ev(args={"": 1, long_key: [1, 2], "stream": 3}) for _ in range(3)]
    events.append(ev(args={long_key: 5, "": "x", "stream": 4}))
    same(dumps(events, 1))


# --- numbers: every digit count around the 8-digit steps and the int64 limits ----------------------


def _ints():
    out = []
    for digits in range(1, 19):
        out += [10 ** (digits - 1), 10**digits - 1]
    out += [10**18]  # 19 digits; 10**19 - 1 is past int64
    out += [2**63 - 1, 12345678, 123456789, 1234567890123456, 12345678901234567]
    return out


@pytest.mark.parametrize("value", _ints())
def test_integer_digit_counts(value):
    events = [
        ev(pid=value, id=value, args={"External id": value, "stream": -value}),
        ev(tid=-value, args={"correlation": value}),
    ]
    same(dumps(events))


@pytest.mark.parametrize(
    "text",
    [
        b"9223372036854775808",
        b"-9223372036854775808",
        b"10000000000000000000",
        b"123456789012345678901234",
        b"18446744073709551616",  # 2**64: wraps to 0 in uint64
        b"18446744073709551621",
        b"00",
        b"-",
        b"1.0",
        b"12345678e1",
    ],
)
def test_integers_it_does_not_read_itself(text):
    """Beyond int64, or with a fraction or exponent: kept as text and converted as msgspec's path does;
    invalid numbers decline the array."""
    data = b'[{"ph": "X", "ts": 1, "pid": ' + text + b"}]"
    if text in (b"00", b"-"):
        assert _fast.decode(data, "us") is None
    else:
        assert declined(data) == 0
        same(data)


@pytest.mark.parametrize(
    "ts",
    [
        "0", "0.5", "7", "12345678", "12345678.9", "123456789.12", "5131190254324.087", "1234567890123456",
        "9223372036854775.807", "-9223372036854775.807", "99999999.999", "100000000", "1.000",
    ],
)  # fmt: skip
def test_times_digit_counts(ts):
    data = f'[{{"ph": "X", "cat": "k", "ts": {ts}, "dur": {ts}}}]'.encode()
    for unit in ("us", "ns"):
        same(data, unit)


@pytest.mark.parametrize("ts", ["9223372036854775.808", "9223372036854776", "12345678901234567", "1.2345"])
def test_times_beyond_int64_ns_are_read_as_text(ts):
    data = f'[{{"ph": "X", "cat": "k", "ts": {ts}, "dur": {ts}}}]'.encode()
    for unit in ("us", "ns"):
        assert declined(data) == 0
        same(data, unit)


# --- dictionary: the recent-codes cache -------------------------------------------------------------


def test_recent_code_then_a_different_string_of_equal_length():
    """Strings of one length that share their first and last 8 bytes (the cache index) but differ
    inside, and short strings of one length: each keeps its own code."""
    a = "void kernel<" + "A" * 40 + ">(int)"
    b = "void kernel<" + "A" * 20 + "B" + "A" * 19 + ">(int)"
    names = [a, a, b, a, b, b, "ab", "ac", "ab", "x", "y", "", "", "caf\u00e9", "cafe", "caf\u00e9"]
    events = [ev(name=n, cat=n[:2], args={"name": n, "stream": i}) for i, n in enumerate(names)]
    same(dumps(events))
    same(json.dumps(events, ensure_ascii=False).encode())


def test_many_names_evict_each_other():
    events = [ev(name=f"kernel_{i % 97}_{'x' * (i % 13)}") for i in range(2000)]
    same(dumps(events))


# --- columns: null fill of gaps, short and long, and of the tail ------------------------------------


def test_sparse_columns_short_and_long_gaps():
    events = []
    for i in range(300):
        args = {}
        if i % 3 == 0:
            args["Sequence number"] = i
        if i % 50 == 7:
            args["Bytes"] = -i
            args["cuda_sync_kind"] = "E"
        if i in (5, 6, 280):
            args["Collective name"] = "allreduce"
        events.append(ev(args=args) if args else ev(pid=None if i % 7 == 0 else i))
    same(dumps(events))


def test_many_events_grow_the_columns():
    """More events than the first column block holds (it is sized from the input length)."""
    events = [{"ts": i, "ph": "i"} if i % 5 else {"ts": i, "args": {"stream": i}} for i in range(20000)]
    same(dumps(events, None).replace(b" ", b""))


def test_last_strings_prefixes_and_escapes():
    """A string equal to one of the last two of its column is taken without a scan: not when it is a
    prefix or an extension of one, or the same text written with escapes or a quote inside."""
    names = ["abc", "abc", "ab", "abcd", "abc", "a\\u0062c", 'ab\\"c', "abc\\n", "ab", "abc\\\\", "abc"]
    events = b",".join(b'{"ph": "X", "name": "%s", "ts": 1}' % n.encode() for n in names)
    same(b"[" + events + b"]")
    same(b"[" + events + b"," + events + b"]")


LEARN = b'{"ph": "X", "cat": "k", "ts": 1, "args": {"stream": 7, "q": [1, 2]}}, ' * 3


@pytest.mark.parametrize(
    "event",
    [
        b'{"ph": "X" , "cat":"k","ts" : 1 ,"args":{ "stream" :7,"q":[1, 2] } }',
        b'{ "ph": "X", "cat": "k", "ts": 1, "args": {"stream": 7, "q": [1, 2]}}',
        b'{"ph": "X",\n  "cat": "k",\t"ts": 1, "args": {}}',
        b'{"ph": "X", "ts": 1, "cat": "k"}',
        b'{"ph": "X", "cat": "k", "ts": 1}',
        b"{}",
        b'{"ph": "X", "cat": "k", "ts": 1, "args": {"stream": 7, "q": [1, 2], "stream2": 8}}',
    ],
)
def test_separators_after_a_learned_layout(event):
    """Templates run from the end of a value to the next value (', "cat": '); other spacing, another
    order, an early '}' and empty objects are read the slow way, the same as msgspec."""
    same(b"[" + LEARN + event + b", " + LEARN[:-2] + b"]")


@pytest.mark.parametrize(
    "event",
    [
        b'{"ph": "X" "cat": "k", "ts": 1}',  # no comma
        b'{"ph": "X", "cat": "k", "ts": 1,}',  # trailing comma
        b'{, "ph": "X", "cat": "k", "ts": 1}',  # comma first
        b'{"ph": "X", "cat": "k", "ts": 1, "args": {"stream": 7,, "q": [1, 2]}}',
        b'{"ph": "X", "cat": "k", "ts": 1, "args": {"stream": 7 "q": [1, 2]}}',
        b'{"ph": "X", "cat": "k", "ts": 1 "args": {}}',
    ],
)
def test_bad_separators_after_a_learned_layout_are_declined(event):
    assert _fast.decode(b"[" + LEARN + event + b"]", "us") is None


# --- differential fuzzing with repeated layouts (what the templates and caches learn from) -----------

LAYOUTS = [
    ev(cat="kernel", name="void k<1>(int)", pid=0, tid=7, args={"External id": 5, "queued": 0, "stream": 7}),
    ev(cat="cuda_runtime", name="cudaLaunchKernel", args={"External id": 5, "cbid": 211, "correlation": 9}),
    {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 3.25, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {"ph": "s", "id": 9, "pid": 1, "tid": 1, "ts": 3.25, "cat": "ac2g", "name": "ac2g"},
]


@FUZZ
@given(
    st.lists(st.sampled_from(range(len(LAYOUTS))) | EVENT, min_size=4, max_size=24),
    st.integers(0, 3),
    st.randoms(use_true_random=False),
)
def test_random_events_in_repeated_layouts(picks, indent, rnd):
    """Mostly the same few layouts, now and then a random event; values nudged, keys dropped."""
    events, plain = [], True  # plain: only the layouts' shapes, which the scanner must accept
    for p in picks:
        if not isinstance(p, int):
            events.append(p)
            plain = False
            continue
        e = json.loads(json.dumps(LAYOUTS[p]))
        if rnd.random() < 0.3:
            e.pop(rnd.choice(sorted(e)))
        if rnd.random() < 0.3 and "ts" in e:
            e["ts"] = rnd.choice([0, 12345678, 5131190254324.087, -1.5, "7", None])
            plain = plain and e["ts"] != "7"  # a string time is declined
        events.append(e)
    data = json.dumps(events, indent=indent or None).encode("utf-8", "surrogatepass")
    check(data)
    if plain:
        assert _fast.decode(data, "us") is not None


@pytest.mark.parametrize("ts", [1e34, 9.99e34, 1e35, -1e34])
def test_times_near_the_decimal_limit_agree(ts):
    """Found by hypothesis: a declined event's ts of 1e34 counted in the msgspec path's largest |ts| (Arrow's
    decimal128(38, 3) cast takes it) but not in the scanner's (its per-value rule stopped at 10**34)."""
    base = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 1}
    check(json.dumps([{}, dict(base, ts=1.5), {"ts": ts}]).encode())
