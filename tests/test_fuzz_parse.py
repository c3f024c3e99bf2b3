"""Fuzzing the parser with mutated real traces: every outcome is a Capture or a TracekitError."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tracebuilder import TraceBuilder
from tracekit.errors import TracekitError
from tracekit.parse.parser import parse_paths

ROOT = Path(__file__).resolve().parent.parent
REAL = [ROOT / "fixtures/hta/triton_example.json.gz", ROOT / "fixtures/hta/inference_rank_1.json.gz"]
SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


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
    path = tmp_path / name
    path.write_bytes(data)
    try:
        capture = parse_paths([path], salvage=salvage)
    except TracekitError as exc:
        assert str(exc)  # a message for the user, one line
        assert "\n" not in str(exc)
        return
    t = capture.table
    assert t.num_rows > 0
    assert t.column("ts_ns").null_count == 0
    kinds = set(t.column("kind").cast("string").to_pylist())
    assert "event" in kinds and "step" in kinds
    busy = t.filter(pc.equal(t.column("kind").cast("string"), "busy"))
    assert pc.all(pc.greater(busy.column("dur_ns"), 0)).as_py() in (True, None)  # None: no busy rows


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
