"""CUDA (and HIP) graph capture in a trace: kernels recorded into a graph, not run (issue 37).

A server (vLLM, SGLang) or a `torch.cuda.graph` block captures its graphs once; a trace of it shows the
host launching hundreds of kernels while the device runs almost nothing, which read as causes would be
"the GPU idled because of the host". It is neither: between `cudaStreamBeginCapture` and
`cudaStreamEndCapture` the launches go into the graph, and `cudaGraphInstantiate` then builds it:

    host T  |BeginCapture|--launch--launch--…--launch--|EndCapture|-- GraphInstantiate --|
    device   (nothing: the launches are recorded)                   (nothing)
             ^ a capture span                                                           ^

A capture span: on one host thread, from a `*StreamBeginCapture` call to the next `*StreamEndCapture`
call's end (the thread's last event when the trace stops first), extended to the end of a
`*GraphInstantiate*` call that starts before the thread's next capture. The calls are recognised by the
runtime-call table (tracekit.analysis.calls: `capture_begin`, `capture_end`, `instantiate`, and the
`kernel_launch` calls recorded, in CUDA's runtime, its driver and HIP). The report names each rank's
spans, the kernel launches recorded in them and their share of the steps (`GraphCaptureInfo`), so a
capture trace is called one; the launch calls inside a span are recorded kernels, never device work
that was late.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.calls import CallKind, call_kind
from tracekit.analysis.causes import RUNTIME_CATS
from tracekit.analysis.model import GraphCaptureInfo

_COLUMNS = ("rank", "pid", "tid", "ts", "end", "launches", "call")


def capture_spans(host: pd.DataFrame) -> pd.DataFrame:
    """The capture spans of the host frame (module docstring): rank, pid, tid, ts, end, the kernel
    launches recorded in them, and the begin call's name."""
    names = host["name"].astype("category")
    kinds = np.array([call_kind(str(c)) for c in names.cat.categories] + [CallKind.OTHER], dtype=object)
    if not (kinds == CallKind.CAPTURE_BEGIN).any():  # the usual case: decided on the distinct names alone
        return pd.DataFrame({c: pd.Series(dtype=object if c == "call" else np.int64) for c in _COLUMNS})
    is_rt = host["cat"].isin(RUNTIME_CATS).to_numpy()
    rt = host[is_rt]
    codes = names.cat.codes.to_numpy()[is_rt]
    kind = kinds[np.where(codes >= 0, codes, kinds.size - 1)]

    def rows_of(k: CallKind) -> pd.Series:
        return pd.Series(kind == k, index=rt.index)

    begin, end = rows_of(CallKind.CAPTURE_BEGIN), rows_of(CallKind.CAPTURE_END)
    inst, launch = rows_of(CallKind.INSTANTIATE), rows_of(CallKind.KERNEL_LAUNCH)
    rows = []
    for (r, p, t), g in rt[begin].groupby(["rank", "pid", "tid"]):  # one loop per capturing thread
        mine = (rt["rank"] == r) & (rt["pid"] == p) & (rt["tid"] == t)
        ends = rt[mine & end].sort_values("ts")
        insts = rt[mine & inst].sort_values("ts")
        last = int(host.loc[(host["rank"] == r) & (host["pid"] == p) & (host["tid"] == t), "end"].max())
        starts = np.sort(g["ts"].to_numpy(np.int64))
        for i, s in enumerate(starts):
            nxt = int(starts[i + 1]) if i + 1 < starts.size else np.iinfo(np.int64).max
            after = ends[(ends["ts"] >= s) & (ends["ts"] < nxt)]
            e = int(after["end"].iloc[0]) if len(after) else last
            built = insts[(insts["ts"] >= e) & (insts["ts"] < nxt)]
            if len(built):
                e = max(e, int(built["end"].iloc[0]))
            n = int((mine & launch & (rt["ts"] >= s) & (rt["ts"] < e)).sum())
            call = str(g.loc[g["ts"] == s, "name"].iloc[0])
            rows.append({"rank": r, "pid": p, "tid": t, "ts": int(s), "end": e, "launches": n, "call": call})
    return pd.DataFrame(rows, columns=list(_COLUMNS))


def capture_info(spans: pd.DataFrame, steps: pd.DataFrame) -> tuple[GraphCaptureInfo, ...]:
    """Per rank with a capture span: how many, their time inside the steps (their union), the launches
    recorded, and that time's share of the rank's steps (host windows)."""
    out = []
    for r, g in spans.groupby("rank"):  # one loop per rank that captured
        st = steps[steps["rank"] == r]
        ws, we = st["ts"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
        s, e = iv.union(g["ts"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
        inside = int(iv.total_overlap(s, e, ws, we).sum()) if ws.size else 0
        total = int((we - ws).sum())
        out.append(
            GraphCaptureInfo(
                rank=int(r),
                captures=len(g),
                capture_ns=int(inside),
                launches=int(g["launches"].sum()),
                share_of_steps=inside / total if total else 0.0,
                call=str(g["call"].iloc[0]),
            )
        )
    return tuple(out)
