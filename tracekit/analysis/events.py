"""The capture table, split into the frames the analysis works on (one pass, vectorised).

Host events are classified once here (which slicing state of DESIGN.md rule 3 each one stands for), so
the rules downstream compare small integer codes, never strings.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema as S

# Host state codes; a higher code wins where intervals nest (DESIGN.md rule 3, "innermost state first").
INTERPRETER, FRAMEWORK, LAUNCH, SYNC, DATALOADER = 0, 1, 2, 3, 4
STATE_NAMES = ("interpreter", "framework", "launch", "sync", "dataloader")

# Runtime/driver calls that block the host until device work finishes. Driver names may carry a _v2
# suffix (cuMemcpyDtoH_v2); it is stripped before the lookup.
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpyDtoD",
    }
)
# Framework ops that read device memory on the host (they contain a copy + a stream sync).
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
DATALOADER_RE = re.compile(r"^enumerate\(DataLoader\)#(\w+)\.__next__")
NCCL_RE = re.compile(r"nccl", re.IGNORECASE)


def is_sync_call(name: str) -> bool:
    return re.sub(r"_v\d+$", "", name) in SYNC_CALLS


@dataclass
class Frames:
    """The frames of one capture. Times are int64 ns; `end` = ts + dur."""

    host: pd.DataFrame  # rank, pid, tid, ts, end, state, cat, name, correlation, external_id, py_*
    device: pd.DataFrame  # rank, device, stream, ts, end, cat, name, correlation, nccl
    steps: pd.DataFrame  # rank, step, pid, tid, ts, end (disjoint per rank, sorted)
    launches: pd.DataFrame  # rank, correlation, pid, tid, ts, end, name (one per correlation)
    has_device: bool
    peak_memory: dict  # (rank, device) → max "Total Allocated" of [memory] instants, bytes


_COLUMNS = (
    "kind",
    "rank",
    "ph",
    "cat",
    "name",
    "pid",
    "tid",
    "ts_ns",
    "dur_ns",
    "device",
    "stream",
    "correlation",
    "external_id",
    "py_id",
    "py_parent",
    "collective",
    "step",
)


def _strings(col: pd.Series) -> pd.Series:
    return col.astype(object).where(col.notna(), None)


def load_frames(table: pa.Table) -> Frames:
    """Split the capture table into host/device/step/launch frames."""
    names = [c for c in _COLUMNS if c in table.column_names]
    t = table.select(names)
    kind = pc.cast(t["kind"], pa.string())
    ev = t.filter(pc.and_(pc.equal(kind, S.KIND_EVENT), pc.equal(pc.cast(t["ph"], pa.string()), "X")))
    df = ev.to_pandas()
    for c in ("rank", "pid", "tid", "ts_ns", "dur_ns"):
        df[c] = df[c].fillna(0).astype(np.int64)
    df["end"] = df["ts_ns"] + df["dur_ns"].clip(lower=0)
    df = df.rename(columns={"ts_ns": "ts"})
    cat = df["cat"].astype(str)

    dev_mask = cat.isin(S.DEVICE_ACTIVITY_CATS)
    dev = df.loc[
        dev_mask, ["rank", "pid", "tid", "ts", "end", "cat", "name", "correlation", "device", "stream"]
    ]
    dev = dev.assign(
        device=dev["device"].fillna(dev["pid"]).astype(np.int64),
        stream=dev["stream"].fillna(dev["tid"]).astype(np.int64),
        cat=dev["cat"].astype(str),
        name=_strings(dev["name"]),
    )
    dev["nccl"] = dev["name"].str.contains(NCCL_RE, na=False)
    dev = dev.sort_values(["rank", "device", "ts", "end"], kind="stable").reset_index(drop=True)

    host_cats = (S.CAT_CPU_OP, S.CAT_RUNTIME, S.CAT_DRIVER, S.CAT_USER_ANNOTATION, S.CAT_PYTHON_FUNCTION)
    host = df.loc[cat.isin(host_cats)].copy()
    host["cat"] = host["cat"].astype(str)
    host_name = host["name"].astype("category")
    cats = host_name.cat.categories.astype(str)
    sync_call_cat = np.array([is_sync_call(n) for n in cats], dtype=bool)
    sync_op_cat = np.isin(cats, list(SYNC_OPS))
    dl_cat = np.array([bool(DATALOADER_RE.match(n)) for n in cats], dtype=bool)
    codes = host_name.cat.codes.to_numpy()
    valid = codes >= 0
    cc = np.where(valid, codes, 0)
    is_sync_call_ev = valid & sync_call_cat[cc] if cats.size else np.zeros(len(host), bool)
    is_sync_op = valid & sync_op_cat[cc] if cats.size else np.zeros(len(host), bool)
    is_dl = valid & dl_cat[cc] if cats.size else np.zeros(len(host), bool)
    hc = host["cat"].to_numpy()
    runtime = (hc == S.CAT_RUNTIME) | (hc == S.CAT_DRIVER)
    cpu_op = hc == S.CAT_CPU_OP
    has_device = bool(len(dev))
    state = np.full(
        len(host), -1, dtype=np.int8
    )  # -1: no state of its own (python_function, other annotations)
    state[cpu_op] = FRAMEWORK
    state[runtime] = LAUNCH
    # An aten::item on a CPU tensor does not wait for a device: sync ops count only when there is one.
    state[(runtime & is_sync_call_ev) | (cpu_op & is_sync_op & has_device)] = SYNC
    state[(hc == S.CAT_USER_ANNOTATION) & is_dl] = DATALOADER
    host["state"] = state
    host["name"] = _strings(host["name"])
    host = host.sort_values(["rank", "pid", "tid", "ts", "end"], ascending=[True, True, True, True, False])
    host = host.reset_index(drop=True)

    launches = host.loc[
        runtime_mask(host) & host["correlation"].notna(),
        ["rank", "correlation", "pid", "tid", "ts", "end", "name"],
    ]
    launches = launches.assign(correlation=launches["correlation"].astype(np.int64))
    # cuLaunchKernel inside cudaLaunchKernelExC may repeat a correlation: keep the outermost call.
    launches = launches.sort_values(["rank", "correlation", "ts"]).drop_duplicates(["rank", "correlation"])
    launches = launches.reset_index(drop=True)

    steps = _steps(t, host, dev)
    return Frames(
        host=host,
        device=dev,
        steps=steps,
        launches=launches,
        has_device=has_device,
        peak_memory=_peak_memory(table),
    )


def _peak_memory(table: pa.Table) -> dict[tuple[int, int], int]:
    """Peak allocated bytes per (rank, device) from [memory] instants (profile_memory=True)."""
    if "total_allocated" not in table.column_names:
        return {}
    t = table.select(["name", "rank", "device", "total_allocated"])
    t = t.filter(
        pc.and_(pc.equal(pc.cast(t["name"], pa.string()), "[memory]"), pc.is_valid(t["total_allocated"]))
    )
    if t.num_rows == 0:
        return {}
    df = t.select(["rank", "device", "total_allocated"]).to_pandas().dropna()
    df = df[df["device"] >= 0]
    peaks = df.groupby(["rank", "device"])["total_allocated"].max()
    return {(int(r), int(d)): int(v) for (r, d), v in peaks.items()}


def runtime_mask(host: pd.DataFrame) -> pd.Series:
    return host["cat"].isin((S.CAT_RUNTIME, S.CAT_DRIVER))


_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def _steps(t: pa.Table, host: pd.DataFrame, dev: pd.DataFrame) -> pd.DataFrame:
    """Step windows per rank: the parser's step rows; else ProfilerStep#N annotations; else one step
    spanning the rank's events (DESIGN.md "Words"). Windows of one rank are made disjoint (a window is
    cut at the next one's start)."""
    kind = pc.cast(t["kind"], pa.string())
    rows = t.filter(pc.equal(kind, S.KIND_STEP)).to_pandas()
    if len(rows):
        steps = pd.DataFrame(
            {
                "rank": rows["rank"].fillna(0).astype(np.int64),
                "step": rows["step"].astype(np.int64)
                if "step" in rows and rows["step"].notna().all()
                else rows["name"].astype(str).str.extract(_STEP_RE)[0].fillna(-1).astype(np.int64),
                "pid": rows["pid"].fillna(0).astype(np.int64),
                "tid": rows["tid"].fillna(0).astype(np.int64),
                "ts": rows["ts_ns"].astype(np.int64),
                "end": (rows["ts_ns"] + rows["dur_ns"]).astype(np.int64),
            }
        )
    else:
        ann = host[(host["cat"] == S.CAT_USER_ANNOTATION) & host["name"].astype(str).str.match(_STEP_RE)]
        steps = pd.DataFrame(
            {
                "rank": ann["rank"],
                "step": ann["name"].astype(str).str.extract(_STEP_RE)[0].astype(np.int64),
                "pid": ann["pid"],
                "tid": ann["tid"],
                "ts": ann["ts"],
                "end": ann["end"],
            }
        )
    ranks = set(host["rank"].unique()) | set(dev["rank"].unique())
    missing = sorted(ranks - set(steps["rank"].unique()))
    extra = []
    for r in missing:  # one loop per rank without steps
        h = host[host["rank"] == r]
        d = dev[dev["rank"] == r]
        lo = min([x["ts"].min() for x in (h, d) if len(x)])
        hi = max([x["end"].max() for x in (h, d) if len(x)])
        top = h.groupby(["pid", "tid"]).size().idxmax() if len(h) else (0, 0)
        extra.append({"rank": r, "step": 0, "pid": top[0], "tid": top[1], "ts": lo, "end": hi})
    if extra:
        steps = pd.concat([steps, pd.DataFrame(extra)], ignore_index=True)
    steps = steps.astype(np.int64).sort_values(["rank", "ts"]).reset_index(drop=True)
    nxt = steps.groupby("rank")["ts"].shift(-1)
    steps["end"] = np.where(
        nxt.notna(), np.minimum(steps["end"], nxt.fillna(0).astype(np.int64)), steps["end"]
    )
    return steps[steps["end"] > steps["ts"]].reset_index(drop=True)


def python_frames(host: pd.DataFrame) -> pd.DataFrame:
    """python_function events that are user code: not torch/, site-packages, built-ins or stdlib."""
    py = host[host["cat"] == S.CAT_PYTHON_FUNCTION]
    if not len(py):
        return py.assign(source=pd.Series(dtype=object))
    names = py["name"].astype("category")
    cats = names.cat.categories.astype(str)
    src = np.array([_user_source(n) for n in cats], dtype=object)
    codes = names.cat.codes.to_numpy()
    py = py.assign(source=src[codes])
    return py[py["source"].notna()]


_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _user_source(name: str) -> str | None:
    """'train.py(57): main' → 'train.py:57'; None for library frames."""
    m = _FRAME_RE.match(name)
    if not m:
        return None
    file = m.group("file")
    norm = file.replace("\\", "/")
    if file.startswith("<") or "site-packages/" in norm or "dist-packages/" in norm:
        return None
    parts = norm.split("/")
    if "torch" in parts[:-1] or norm.startswith("torch/"):
        return None
    if len(parts) == 1 and parts[0].removesuffix(".py") in _STDLIB:
        return None
    if "/lib/python3" in norm:
        return None
    return f"{parts[-1]}:{m.group('line')}"
