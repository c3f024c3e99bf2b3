"""The replayed timeline: the capture's events at their replayed times, as analysis frames (what the
attribution of the predicted timeline runs on), as a capture table and as a Chrome trace (`whatif
--trace`, for Perfetto and TensorBoard)."""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.analysis.events import Frames
from tracekit.data import schema as S
from tracekit.data.store import atomic_path
from tracekit.whatif.graph import Graph, host_positions
from tracekit.whatif.replay import map_times


def replayed_frames(fr: Frames, g: Graph, rep: np.ndarray) -> Frames:
    """The capture's analysis frames (those the graph was built from) at replayed times: what
    `load_frames(replayed_table(...))` gives, without a second copy of the capture's table."""
    host = fr.host.assign(
        ts=rep[g.host_start_node], end=np.maximum(rep[g.host_end_node], rep[g.host_start_node])
    )
    base = g.device_base
    di = np.arange(len(g.device))
    d_ts = rep[base + 2 * di]
    dev = g.device.drop(columns=["launch_ts", "launch_node"]).assign(
        ts=d_ts, end=np.maximum(rep[base + 2 * di + 1], d_ts)
    )
    order = np.lexsort(
        (dev["end"].to_numpy(), dev["ts"].to_numpy(), dev["device"].to_numpy(), dev["rank"].to_numpy())
    )
    dev = dev.iloc[order].reset_index(drop=True)
    pos = host_positions(g.host_row, fr.launches["row"].to_numpy())  # each launch's own host event
    launches = fr.launches.assign(ts=host["ts"].to_numpy()[pos], end=host["end"].to_numpy()[pos])
    steps = fr.steps.copy()
    for (r, p, t), idx in steps.groupby(["rank", "pid", "tid"]).indices.items():  # one loop per step thread
        ti = g.thread_index.get((int(r), int(p), int(t)))
        ts = map_times(g, ti, steps["ts"].to_numpy(np.int64)[idx], rep)
        end = map_times(g, ti, steps["end"].to_numpy(np.int64)[idx], rep)
        steps.iloc[idx, steps.columns.get_loc("ts")] = ts
        steps.iloc[idx, steps.columns.get_loc("end")] = np.maximum(end, ts)
    steps = (
        steps[steps["end"] > steps["ts"]].sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)
    )
    return Frames(
        host=host,
        device=dev,
        steps=steps,
        launches=launches,
        has_device=fr.has_device,
        peak_memory=fr.peak_memory,
        step_rules=fr.step_rules,
    )


def replayed_table(table: pa.Table, g: Graph, rep: np.ndarray) -> pa.Table:
    """The capture's host and device events (kind event, ph X) and its step rows, at replayed times."""

    d = g.device
    base = g.device_base
    di = np.arange(len(d))
    rows = np.concatenate([g.host_row, d["row"].to_numpy(np.int64)])
    ts = np.concatenate([rep[g.host_start_node], rep[base + 2 * di]])
    end = np.concatenate([rep[g.host_end_node], rep[base + 2 * di + 1]])
    order = np.argsort(rows, kind="stable")
    rows, ts, end = rows[order], ts[order], end[order]
    events = table.take(pa.array(rows))
    events = _set_times(events, ts, np.maximum(end - ts, 0))
    kind = pc.cast(table["kind"], pa.string())
    step_idx = np.flatnonzero(pc.equal(kind, S.KIND_STEP).to_numpy(zero_copy_only=False))
    if step_idx.size:
        steps = table.take(pa.array(step_idx))
        s_ts = steps["ts_ns"].to_numpy(zero_copy_only=False).astype(np.int64)
        s_end = s_ts + np.nan_to_num(
            steps["dur_ns"].to_numpy(zero_copy_only=False).astype(np.float64)
        ).astype(np.int64)
        s_rank = np.nan_to_num(steps["rank"].to_numpy(zero_copy_only=False).astype(np.float64)).astype(
            np.int64
        )
        s_pid = np.nan_to_num(steps["pid"].to_numpy(zero_copy_only=False).astype(np.float64)).astype(np.int64)
        s_tid = np.nan_to_num(steps["tid"].to_numpy(zero_copy_only=False).astype(np.float64)).astype(np.int64)
        new_ts, new_end = s_ts.copy(), s_end.copy()
        for i in range(step_idx.size):  # one loop per step row
            ti = g.thread_index.get((int(s_rank[i]), int(s_pid[i]), int(s_tid[i])))
            a, z = map_times(g, ti, np.array([s_ts[i], s_end[i]]), rep)
            new_ts[i], new_end[i] = a, max(z, a)
        steps = _set_times(steps, new_ts, new_end - new_ts)
        events = pa.concat_tables([events, steps.cast(events.schema)])
    return events


def _set_times(t: pa.Table, ts: np.ndarray, dur: np.ndarray) -> pa.Table:
    i = t.column_names.index("ts_ns")
    t = t.set_column(
        i, t.schema.field("ts_ns"), pa.array(ts.astype(np.int64)).cast(t.schema.field("ts_ns").type)
    )
    j = t.column_names.index("dur_ns")
    return t.set_column(
        j, t.schema.field("dur_ns"), pa.array(dur.astype(np.int64)).cast(t.schema.field("dur_ns").type)
    )


_ARG_COLUMNS = ("correlation", "external_id", "device", "stream")
_ARG_NAMES = {
    "correlation": "correlation",
    "external_id": "External id",
    "device": "device",
    "stream": "stream",
}


def chrome_trace(table: pa.Table, title: str) -> dict:
    """A replayed table (`replayed_table`) as a Chrome trace: one document per capture, every rank's
    events in it (pid and tid as recorded; a rank's process is labelled)."""
    cols = {c: table[c].to_pylist() for c in ("kind", "rank", "cat", "name", "pid", "tid", "ts_ns", "dur_ns")}
    args_cols = {c: table[c].to_pylist() for c in _ARG_COLUMNS if c in table.column_names}
    events = []
    labelled = set()
    # A step whose ProfilerStep span is among the events is written once, as that span (twice, the
    # trace read back would repeat each step number: parse/sanity.py refuses it).
    spans = {
        (r, n)
        for k, r, n, c in zip(cols["kind"], cols["rank"], cols["name"], cols["cat"])
        if k != S.KIND_STEP and c == S.CAT_USER_ANNOTATION
    }
    for i in range(table.num_rows):  # one loop per event (the output is one JSON object per event)
        kind = cols["kind"][i]
        name = cols["name"][i]
        cat = cols["cat"][i]
        if kind == S.KIND_STEP:
            if (cols["rank"][i], name) in spans:
                continue
            cat, name = S.CAT_USER_ANNOTATION, name or f"ProfilerStep#{i}"
        pid, tid = cols["pid"][i], cols["tid"][i]
        args = {_ARG_NAMES[c]: v[i] for c, v in args_cols.items() if v[i] is not None}
        if cat in S.DEVICE_ACTIVITY_CATS:
            args.setdefault("device", pid)
            args.setdefault("stream", tid)
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": cols["ts_ns"][i],  # ns here; written as µs text by write_chrome_trace
                "dur": cols["dur_ns"][i] or 0,
                "args": args,
            }
        )
        rank = cols["rank"][i]
        if pid is not None and (pid, rank) not in labelled and cat not in S.DEVICE_ACTIVITY_CATS:
            labelled.add((pid, rank))
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"rank {rank} (replayed)"},
                }
            )
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceName": title, "traceEvents": events}


def write_chrome_trace(doc: dict, path: Path, *, replace: bool = True) -> Path:
    """Write the trace (gzip when the name ends in .gz), atomically (over an existing file only with
    `replace`). Times are written as µs with three decimals from the integer ns, never through a float."""

    raw = msgspec.json.encode(_with_us_text(doc))
    with atomic_path(Path(path), replace=replace) as tmp:
        data = gzip.compress(raw, compresslevel=6) if str(path).endswith(".gz") else raw
        tmp.write_bytes(data)
    return Path(path)


def _with_us_text(doc: dict) -> dict:
    events = []
    for ev in doc["traceEvents"]:
        if "ts" in ev:
            ev = {**ev, "ts": msgspec_raw_us(ev["ts"]), "dur": msgspec_raw_us(ev.get("dur", 0))}
        events.append(ev)
    return {**doc, "traceEvents": events}


def msgspec_raw_us(ns: int):

    ns = int(ns)
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return msgspec.Raw(f"{sign}{q}.{r:03d}".encode())


__all__ = ["replayed_frames", "replayed_table", "chrome_trace", "write_chrome_trace"]
