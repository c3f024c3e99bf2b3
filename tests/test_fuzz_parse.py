"""Fuzzing the parser with mutated real traces: every outcome is a Capture or a one-line TracekitError,
and nothing half-written is left beside the output. Also the two forms the issue-13 fixes are about:
float-noise timestamps and deeply nested values, decoded alike by the C scanner and by msgspec."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path

import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.data.store import read_capture
from tracekit.errors import TracekitError
from tracekit.parse.parser import parse_paths, parse_to_file

ROOT = Path(__file__).resolve().parent.parent
REAL = [ROOT / "fixtures/hta/triton_example.json.gz", ROOT / "fixtures/hta/inference_rank_1.json.gz"]
SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# Each example of the two-decoder tests parses three times: fewer of them.
TWICE = settings(SETTINGS, max_examples=max(1, SETTINGS.max_examples // 3))


def _synthetic() -> bytes:
    t = TraceBuilder(rank=1, device_properties=[{"id": 0, "name": "GPU"}])
    t.step(1, 0, 100.5)
    t.op("aten::mm", 10.25, 20)
    t.launch(12, 5, corr=1)
    t.kernel("gemm", 30, 40.125, corr=1)
    t.memcpy(75, 5, corr=2)
    t.memory(80, 512, 1024)
    t.python("x.py(1): f", 1, 90, py_id=1)
    return json.dumps(t.build(), indent=1).encode()


BASES = [gzip.decompress(p.read_bytes()) for p in REAL] + [_synthetic()]

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


def outcome(tmp_path: Path, data: bytes, *, salvage: bool = False, name: str = "t.pt.trace.json") -> None:
    """Parse `data` as `tracekit parse` does (streamed to a Parquet file in a fresh folder): a capture,
    or one line of TracekitError and an empty folder (no output, no temporary file)."""
    path = tmp_path / name
    path.write_bytes(data)
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        parse_to_file([path], folder / "c.parquet", salvage=salvage)
    except TracekitError as exc:
        assert str(exc)  # a message for the user, one line
        assert "\n" not in str(exc)
        assert list(folder.iterdir()) == []
        return
    assert [p.name for p in folder.iterdir()] == ["c.parquet"]
    t = read_capture(folder / "c.parquet").table
    assert t.num_rows > 0
    assert t.column("ts_ns").null_count == 0
    kinds = set(t.column("kind").cast("string").to_pylist())
    assert kinds == {"event", "step"}  # nothing else is stored
    steps = t.filter(pc.equal(t.column("kind").cast("string"), "step"))
    assert pc.all(pc.greater_equal(steps.column("dur_ns"), 0)).as_py()


@SETTINGS
@given(base=st.sampled_from(BASES), cut=st.floats(0, 1), salvage=st.booleans(), gz=st.booleans())
def test_truncation(tmp_path, base, cut, salvage, gz):
    data = base[: int(len(base) * cut)]
    if gz:
        data = gzip.compress(base)[: max(2, int(len(gzip.compress(base)) * cut))]
    outcome(tmp_path, data, salvage=salvage, name="t.json.gz" if gz else "t.json")


@SETTINGS
@given(
    base=st.sampled_from(BASES),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8),
    salvage=st.booleans(),
)
def test_byte_flips(tmp_path, base, flips, salvage):
    data = bytearray(base)
    for where, byte in flips:
        data[min(int(where * len(data)), len(data) - 1)] = byte
    outcome(tmp_path, bytes(data), salvage=salvage)


@SETTINGS
@given(
    base=st.sampled_from(BASES),
    edits=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "args.device",
                             "args.stream", "args.correlation", "args.External id", "args.name"]),
            st.booleans(),
            JSON_VALUES,
        ),
        min_size=1,
        max_size=6,
    ),
    top=st.one_of(st.none(), st.tuples(st.sampled_from(["distributedInfo", "displayTimeUnit",
                                                        "deviceProperties", "traceEvents"]), JSON_VALUES)),
)  # fmt: skip
def test_wrong_types_and_missing_fields(tmp_path, base, edits, top):
    doc = json.loads(base)
    events = doc["traceEvents"]
    for where, key, delete, value in edits:
        ev = events[min(int(where * len(events)), len(events) - 1)]
        target = ev
        if key.startswith("args."):
            target = ev.get("args") if isinstance(ev.get("args"), dict) else None
            key = key[5:]
        if target is None:
            continue
        if delete:
            target.pop(key, None)
        else:
            target[key] = value
    if top is not None:
        doc[top[0]] = top[1]
    outcome(tmp_path, json.dumps(doc).encode())


def both_decoders(tmp_path: Path, data: bytes) -> None:
    """The C scanner and msgspec parse `data` into the same capture (or fail alike)."""
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(data)
    results = []
    for decoder in ("", "msgspec"):
        os.environ["TRACEKIT_DECODER"] = decoder
        try:
            results.append(parse_paths([path]))
        except TracekitError as exc:
            results.append(str(exc))
        finally:
            del os.environ["TRACEKIT_DECODER"]
    fast, slow = results
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    assert fast.table.equals(slow.table)
    assert fast.meta == slow.meta


def _noisy(us: float) -> str:
    """A time as a script that shifts traces with floats writes it: repr of a double, with more than
    three decimals where a neighbouring double has them (below ~1e13 µs; above, a double has fewer)."""
    text = repr(us)
    for _ in range(4):
        if "e" in text or len(text.partition(".")[2]) > 3:
            break
        us = math.nextafter(us, math.inf)
        text = repr(us)
    return text


@TWICE
@given(
    base=st.sampled_from(BASES),
    picks=st.lists(st.floats(0, 1), min_size=1, max_size=40),
    shift=st.floats(-1e6, 1e6),
)
def test_float_noise_timestamps(tmp_path, base, picks, shift):
    """Some ts (and dur) values rewritten by a float shift (repr of a double: `5128440295499.2295`): both
    decoders read them alike (rounded half to even to the ns), and the parse succeeds."""
    doc = json.loads(base)
    events = [e for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    marks = {}
    for i, where in enumerate(picks):
        ev = events[min(int(where * len(events)), len(events) - 1)]
        key = "dur" if i % 4 == 3 and isinstance(ev.get("dur"), (int, float)) else "ts"
        if isinstance(ev[key], str):  # picked before
            continue
        marks[f"@noise{i}@"] = _noisy(float(ev[key]) + (shift if key == "ts" else 0.0))
        ev[key] = f"@noise{i}@"
    text = json.dumps(doc)
    for mark, value in marks.items():
        text = text.replace(f'"{mark}"', value)
    both_decoders(tmp_path, text.encode())
    outcome(tmp_path, text.encode())


@TWICE
@given(
    base=st.sampled_from(BASES),
    deep=st.lists(
        st.tuples(st.floats(0, 1), st.sampled_from(["args.deep", "args.name", "name", "other", "item"]),
                  st.integers(1, 3000), st.sampled_from("[{")),
        min_size=1,
        max_size=3,
    ),
)  # fmt: skip
def test_deeply_nested_values(tmp_path, base, deep):
    """Values nested up to 3000 levels (msgspec's recursion limit is ~1000) in ignored keys, kept keys,
    as items: never a RecursionError; both decoders give the same capture."""
    doc = json.loads(base)
    events = doc["traceEvents"]
    marks = {}
    for i, (where, key, depth, bracket) in enumerate(deep):
        mark = f"@deep{i}@"
        if bracket == "[":
            marks[mark] = "[" * depth + "]" * depth
        else:
            marks[mark] = '{"k": ' * (depth - 1) + "{}" + "}" * (depth - 1)
        if key == "item":
            events.insert(min(int(where * len(events)), len(events)), mark)
            continue
        ev = events[min(int(where * len(events)), len(events) - 1)]
        if not isinstance(ev, dict):
            continue
        if key.startswith("args."):
            if not isinstance(ev.get("args"), dict):
                ev["args"] = {}
            ev["args"][key[5:]] = mark
        else:
            ev[key] = mark
    text = json.dumps(doc)
    for mark, value in marks.items():
        text = text.replace(f'"{mark}"', value)
    both_decoders(tmp_path, text.encode())
    outcome(tmp_path, text.encode())


def test_a_deep_value_is_cut_alike_at_any_stack_depth():
    """What hypothesis found (test_deeply_nested_values: an event's name, or a kept args.name, a list
    nested ~990 levels): the scanner declines that event and msgspec decodes it alone, and a non-string
    value is kept as its JSON text, which json.dumps cut (RecursionError) or not depending on how deep
    the caller's stack was, so the two decoders' captures differed. The text is now the same from any
    stack depth; both decoders agree on such a trace."""
    from tracekit.parse.decode import _as_text

    for depth in (900, 986, 995):
        value: list = []
        for _ in range(depth - 1):  # (json.loads of it would itself hit the recursion limit)
            value = [value]

        def nested(n: int, value=value) -> object:
            return nested(n - 1) if n else _as_text(value)

        assert len({str(nested(n)) for n in (0, 100, 300, 600)}) == 1, depth


def test_a_process_name_dictionary_holds_only_the_names_metadata_events_use():
    """`args.name` is kept as the `label` of metadata events only; its dictionary held the other
    events' names too on one decoder's path (an unused entry: the tables were unequal)."""
    import numpy as np

    from tracekit.parse.decode import first_seen

    codes, uniques = first_seen(np.array([2, -1, 0, 2, -1], np.int32), ["a", "b", "c"])
    assert codes.tolist() == [0, -1, 1, 0, -1] and uniques == ["c", "a"]
    codes, uniques = first_seen(np.array([-1, -1], np.int32), ["a"])
    assert codes.tolist() == [-1, -1] and uniques == []
