"""Storing an analysis back into its capture (`analyze --store`): idle rows and the JSON report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis.model import Report
from tracekit.data import schema as S
from tracekit.data.store import write_capture


def idle_rows(report: Report) -> pa.Table:
    """The report's idle pieces as schema rows of kind "idle" (pid = device, cause and step set)."""
    return idle_table(report.idle_intervals)


def idle_table(idle) -> pa.Table:
    """Idle pieces (a frame: rank, device, step, ts_ns, dur_ns, cause) as schema rows of kind "idle"."""
    n = 0 if idle is None else len(idle)
    cols = {}
    if n:
        cols = {
            "rank": idle["rank"].to_numpy(np.int64),
            "pid": idle["device"].to_numpy(np.int64),
            "device": idle["device"].to_numpy(np.int64),
            "ts_ns": idle["ts_ns"].to_numpy(np.int64),
            "dur_ns": idle["dur_ns"].to_numpy(np.int64),
            "step": idle["step"].to_numpy(np.int64),
            "cause": idle["cause"].astype(str).to_numpy(object),
        }
    arrays = []
    for field in S.SCHEMA:
        if field.name == "kind":
            arrays.append(pa.array([S.KIND_IDLE] * n, pa.string()).dictionary_encode().cast(field.type))
        elif field.name == "ph":
            arrays.append(pa.array(["X"] * n, pa.string()).dictionary_encode().cast(field.type))
        elif field.name in cols:
            values = cols[field.name]
            if pa.types.is_dictionary(field.type):
                arrays.append(pa.array(values, pa.string()).dictionary_encode().cast(field.type))
            else:
                arrays.append(pa.array(values).cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=S.SCHEMA)


def store_report(capture, report: Report) -> Path:
    """Replace the capture's idle rows and stored analysis with this report's, atomically, in place."""

    table = capture.table
    kind = pc.cast(table["kind"], pa.string())
    keep = table.filter(pc.not_equal(kind, S.KIND_IDLE)).cast(S.SCHEMA)
    table = pa.concat_tables([keep, idle_rows(report)])
    capture.table = table
    capture.meta = {**capture.meta, "analysis": report.to_json()}
    return write_capture(capture, capture.path, force=True)


def stored_report(capture) -> Report | None:
    """The report `analyze --store` kept in a capture, or None."""
    doc = (capture.meta or {}).get("analysis")
    return Report.from_json(doc) if doc else None
