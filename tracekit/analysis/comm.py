"""Communication on each rank (issue 40): what a collective costs the step, and why.

One definition for a GPU (NCCL) trace and a CPU (gloo) trace. A *collective* is where the trace shows
the communication itself run:

    GPU (NCCL):  a device kernel whose name holds `nccl` (ncclDevKernel_AllReduce…); its element count,
                 where Kineto wrote it, in the kernel's or its launching `record_param_comms` op's args
    CPU (gloo):  the backend's annotation `gloo:all_reduce` (`gloo:all_gather`, …) on the backend's own
                 thread (pt_gloo_runloop), from when that thread takes the work to when it is done; the
                 step thread only issues it (`c10d::allreduce_`, a few hundred µs) and later blocks in
                 `work.wait()`, which the trace does not record: a gap in its events

On each rank, per step, with C the union of its collectives and the rank's *compute* its other work:

    GPU   compute |==fwd==|==bwd==|=bwd=|     |=opt=|          (non-collective kernels)
          comm            |==b0==|   |====b1====|                (NCCL kernels, bucket 0, bucket 1)
                          hidden     h  exposed                  exposed = C − compute
    CPU   step T  |==fwd==|==bwd==|=bwd=|.blocked.|=opt=|        (blocked: a collective wait, below)
          gloo T'         |======b0======|
          gloo T''                 |======b1=====|
                                          exposed = the blocked time

    comm      = |C ∩ step|
    exposed   = GPU: |C ∩ step| − |C ∩ compute|; CPU: the step thread's collective waits in the step
    hidden    = comm − exposed (communication in flight while the rank computed)
    compute   = GPU: |non-collective device work ∩ step|; CPU: step − exposed (all the step thread did
                that was not waiting for a collective)

*Collective wait* (the step thread blocked on a CPU collective): of the gaps between the step thread's
events (cpu_ops, runtime calls), the one that overlaps a collective of its rank most, where the thread
resumed no earlier than WAKE_TOLERANCE_NS before the collective's span closed: from the gap's start to
that end (or the gap's end), within C. The thread woke because the collective finished (DDP's reducer
waits on each bucket at the end of backward):

    step T   |- c10d::allreduce_ -|     (no event: blocked in work.wait())    |- copy_bucket_to_grad -|
    gloo T'     |============== gloo:all_reduce ==============|
             collective wait:      [gap start ........................ end)   (the rest: interpreter)

Exposed communication splits by cause, across ranks (rule 5, `tracekit.analysis.collective`: a
collective is matched across ranks; rank r's wait is the time before the last rank arrived,
clip(last start − ts_r, 0, dur_r)): the first `wait` of each instance is waiting for a late peer, the
rest the transfer itself:

    exposed wait      = |exposed ∩ ∪ [ts_i, ts_i + wait_i)|  (a straggler's late arrival)
    exposed transfer  = exposed − exposed wait                (moving the data)

A bucket is the i-th collective of a name in its step on its rank (DDP issues its buckets in the same
order every step): the per-bucket table shows its elements (where the trace has them), its transfer
(its time after the last arrival), its wait and its exposed time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.causes import CAT_COLLECTIVE_WAIT, CAUSES, HOST_STATES
from tracekit.analysis.collective import match_collectives
from tracekit.analysis.model import CommBucket, CommRank, CommStep, Communication, SlowRank

# A CPU backend's own span of a collective, on the backend's thread (torch 2.x ProcessGroupGloo writes
# `gloo:<op>` record_function spans there; `nccl:<op>` on the step thread is only NCCL's enqueue).
HOST_COLLECTIVE_RE = re.compile(r"^(gloo|mpi|ucc):")
COLLECTIVE_WAIT_NAME = "collective wait"
# Host events that cover a step thread while it works or calls into the framework (its gaps are the rest).
_BUSY_CATS = frozenset({"cpu_op", "cuda_runtime", "cuda_driver"})

# How long after a step thread resumes a CPU backend may still close the span of the collective it waited
# for: gloo wakes the waiter, then ends its record_function span when the scheduler next runs its thread
# (on a loaded machine milliseconds later; docs/DESIGN.md "Communication").
WAKE_TOLERANCE_NS = 5_000_000
# A rank is named slow when the ranks that wait for it wait at least this share of their step (exposed):
# below, which rank arrives last is scheduling noise (docs/results/ddp_cpu.md, "The slow rank").
SLOW_RANK_MIN_SHARE = 0.05
COLLECTIVE_COLUMNS = ("rank", "device", "ts", "end", "name", "step", "elements", "correlation")
# The ends of one collective on different ranks further apart than this (median): the ranks' clocks are
# not comparable, and waits are not split (the what-if graph's own rule, whatif.graph.CLOCK_SKEW_NS).
CLOCK_SKEW_NS = 100_000


def host_collectives(host: pd.DataFrame, step_threads: set) -> pd.DataFrame:
    """The CPU backends' collective spans (rank, pid, tid, ts, end, name, and `pos`: the span's position
    in `host`): `gloo:<op>` annotations on threads that own no step."""
    cols = ["rank", "pid", "tid", "ts", "end"]
    is_ann = (host["cat"] == "user_annotation").to_numpy()
    pos = np.flatnonzero(is_ann)
    ann = host.iloc[pos]
    names = ann["name"].astype(str)
    m = names.str.match(HOST_COLLECTIVE_RE).to_numpy(bool).copy()
    keys = zip(ann["rank"].to_numpy(), ann["pid"].to_numpy(), ann["tid"].to_numpy())
    m &= np.array([(int(r), int(p), int(t)) not in step_threads for r, p, t in keys], dtype=bool)
    out = ann.loc[m, cols] if len(ann) else ann[cols]
    return out.assign(name=names[m].to_numpy(object), pos=pos[m]).reset_index(drop=True)


def waits_on_thread(
    busy_s: np.ndarray,
    busy_e: np.ndarray,
    span_s: np.ndarray,
    span_e: np.ndarray,
    tolerance_ns: int = WAKE_TOLERANCE_NS,
) -> tuple[np.ndarray, np.ndarray]:
    """A step thread's collective waits (module docstring): `busy_*` its events' union, `span_*` its
    rank's collectives (any order). Each collective's wait is the gap between the thread's events that
    overlaps it most, provided the thread resumed no earlier than `tolerance_ns` before the collective
    ended (a CPU backend wakes the waiting thread, then closes its own span when the scheduler next runs
    it); the wait runs from the gap's start to the end of the last collective it waits for (or the gap's
    end, if that is earlier), within the collectives. Disjoint sorted pieces."""
    empty = np.zeros(0, np.int64), np.zeros(0, np.int64)
    gs, ge = iv.complement(busy_s, busy_e)
    if not span_s.size or not gs.size:
        return empty
    # each collective against the gaps it overlaps: the one it overlaps most
    best = np.full(span_s.size, -1, np.int64)
    for i in range(span_s.size):  # one loop per collective (a few per step)
        lo = np.searchsorted(ge, span_s[i], side="right")
        hi = np.searchsorted(gs, span_e[i], side="left")
        if hi <= lo:
            continue
        ov = np.minimum(ge[lo:hi], span_e[i]) - np.maximum(gs[lo:hi], span_s[i])
        k = lo + int(np.argmax(ov))
        if ov.max() > 0 and ge[k] >= span_e[i] - tolerance_ns:
            best[i] = k
    ok = best >= 0
    if not ok.any():
        return empty
    gap = best[ok]
    last = pd.Series(span_e[ok]).groupby(gap).max()
    ws = gs[last.index.to_numpy()]
    we = np.minimum(last.to_numpy(np.int64), ge[last.index.to_numpy()])
    cs, ce = iv.union(span_s, span_e)
    _, _, ps, pe = iv.intersect_windows(cs, ce, ws, we)
    return ps, pe


def collective_wait_events(host: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The derived host events (host frame columns but `state`/`family`/`row`) of every step thread's
    collective waits on a CPU backend; empty where the trace has no such collectives."""
    step_threads = {
        (int(r), int(p), int(t)) for r, p, t in steps[["rank", "pid", "tid"]].drop_duplicates().to_numpy()
    }
    spans = host_collectives(host, step_threads)
    rows = []
    for key in sorted(step_threads):  # one loop per step thread
        mine = spans[spans["rank"].to_numpy() == key[0]]
        if not len(mine):
            continue
        ev = host[
            (host["rank"].to_numpy() == key[0])
            & (host["pid"].to_numpy() == key[1])
            & (host["tid"].to_numpy() == key[2])
            & host["cat"].astype(str).isin(_BUSY_CATS).to_numpy()
        ]
        bs, be = iv.union(ev["ts"].to_numpy(np.int64), ev["end"].to_numpy(np.int64))
        ws, we = waits_on_thread(bs, be, mine["ts"].to_numpy(np.int64), mine["end"].to_numpy(np.int64))
        if ws.size:
            rows.append(
                pd.DataFrame(
                    {
                        "rank": np.full(ws.size, key[0], np.int64),
                        "pid": np.full(ws.size, key[1], np.int64),
                        "tid": np.full(ws.size, key[2], np.int64),
                        "ts": ws,
                        "end": we,
                    }
                )
            )
    if not rows:
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in ("rank", "pid", "tid", "ts", "end")})
    return pd.concat(rows, ignore_index=True)


def collectives_frame(dev: pd.DataFrame, dev_step: np.ndarray, host: pd.DataFrame, steps: pd.DataFrame):
    """Every collective of the frames, one row each (COLLECTIVE_COLUMNS): the NCCL kernels (device ≥ 0,
    their step as the step definition assigns device work) and the CPU backends' spans (device -1, the
    step window of their rank in which they start; -1 outside every one)."""
    nccl = dev["nccl"].to_numpy()
    elems = (
        np.nan_to_num(dev["elements"].to_numpy(np.float64), nan=-1).astype(np.int64)
        if "elements" in dev.columns
        else np.full(len(dev), -1, np.int64)
    )
    gpu = pd.DataFrame(
        {
            "rank": dev["rank"].to_numpy(np.int64)[nccl],
            "device": dev["device"].to_numpy(np.int64)[nccl],
            "ts": dev["ts"].to_numpy(np.int64)[nccl],
            "end": dev["end"].to_numpy(np.int64)[nccl],
            "name": dev.loc[nccl, "name"].astype(str).to_numpy(object),
            "step": np.asarray(dev_step, np.int64)[nccl],
            "elements": elems[nccl],
            "correlation": dev["correlation"].to_numpy(np.float64)[nccl],
        }
    )
    step_threads = {
        (int(r), int(p), int(t)) for r, p, t in steps[["rank", "pid", "tid"]].drop_duplicates().to_numpy()
    }
    spans = host_collectives(host, step_threads)
    step = np.full(len(spans), -1, np.int64)
    for r, g in steps.groupby("rank"):  # one loop per rank
        m = np.flatnonzero(spans["rank"].to_numpy() == r)
        if not m.size:
            continue
        ws, we = g["ts"].to_numpy(np.int64), g["end"].to_numpy(np.int64)
        k = np.searchsorted(ws, spans["ts"].to_numpy(np.int64)[m], side="right") - 1
        inside = (k >= 0) & (spans["ts"].to_numpy(np.int64)[m] < we[np.maximum(k, 0)])
        step[m[inside]] = g["step"].to_numpy(np.int64)[k[inside]]
    cpu = pd.DataFrame(
        {
            "rank": spans["rank"].to_numpy(np.int64),
            "device": np.full(len(spans), -1, np.int64),
            "ts": spans["ts"].to_numpy(np.int64),
            "end": spans["end"].to_numpy(np.int64),
            "name": spans["name"].to_numpy(object),
            "step": step,
            "elements": np.full(len(spans), -1, np.int64),
            "correlation": np.full(len(spans), np.nan),
        }
    )
    parts = [f for f in (gpu, cpu) if len(f)]
    if not parts:
        return gpu
    return pd.concat(parts, ignore_index=True)


def exposed_pieces(
    comm_s: np.ndarray, comm_e: np.ndarray, compute_s: np.ndarray, compute_e: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """C − compute, disjoint sorted (the GPU's exposed communication before it is clipped to steps)."""
    gs, ge = iv.complement(compute_s, compute_e)
    _, _, ps, pe = iv.intersect_windows(comm_s, comm_e, gs, ge)
    return ps, pe


def step_figures(
    ws: np.ndarray,
    we: np.ndarray,
    comm: tuple[np.ndarray, np.ndarray],
    exposed: tuple[np.ndarray, np.ndarray],
    compute: tuple[np.ndarray, np.ndarray] | None,
) -> dict[str, np.ndarray]:
    """Per step window (ws, we): comm, exposed, hidden and compute ns (module docstring); `compute` None
    on CPU (the step less the exposed time)."""
    comm_ns = iv.total_overlap(*comm, ws, we)
    exposed_ns = iv.total_overlap(*exposed, ws, we)
    compute_ns = (we - ws) - exposed_ns if compute is None else iv.total_overlap(*compute, ws, we)
    return {
        "comm_ns": comm_ns,
        "exposed_ns": exposed_ns,
        "hidden_ns": comm_ns - exposed_ns,
        "compute_ns": compute_ns,
    }


def split_exposed(
    exp_s: np.ndarray,
    exp_e: np.ndarray,
    wait_s: np.ndarray,
    wait_e: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
) -> np.ndarray:
    """Per step window: the exposed time that lies in a collective's wait for its late peers."""
    ps, pe = iv.union(wait_s, wait_e)
    _, _, xs, xe = iv.intersect_windows(exp_s, exp_e, ps, pe)
    xs, xe = iv.union(xs, xe)
    return iv.total_overlap(xs, xe, ws, we)


@dataclass
class CommPart:
    """One rank's (device's) communication as a part of the analysis holds it: its steps' figures and
    its exposed pieces, for the merge to split by cause once the collectives are matched across ranks."""

    rank: int
    device: int  # -1: a CPU backend on the rank's host
    step: np.ndarray  # step numbers
    ws: np.ndarray  # the steps' bounds
    we: np.ndarray
    figures: dict  # step_figures
    exp_s: np.ndarray  # exposed pieces, disjoint sorted
    exp_e: np.ndarray


def comm_parts(fr, wins: dict, coll: pd.DataFrame) -> list[CommPart]:
    """The CommParts of the frames `fr` (events.Frames): every GPU with an NCCL kernel (`wins`: its
    steps, tracekit.analysis.steps) and every rank with a CPU backend's collectives (its host windows)."""
    out: list[CommPart] = []
    dev = fr.device
    nccl = dev["nccl"].to_numpy()
    for (r, d), g in dev.groupby(["rank", "device"]):  # one loop per device
        w = wins.get((int(r), int(d)))
        m = g["nccl"].to_numpy()
        if w is None or w.empty or not m.any():
            continue
        s, e = g["ts"].to_numpy(np.int64), g["end"].to_numpy(np.int64)
        comm = iv.union(s[m], e[m])
        compute = iv.union(s[~m], e[~m])
        exp = exposed_pieces(*comm, *compute)
        ws, we = w["ts"].to_numpy(np.int64), w["end"].to_numpy(np.int64)
        figs = step_figures(ws, we, comm, exp, compute)
        out.append(CommPart(int(r), int(d), w["step"].to_numpy(np.int64), ws, we, figs, *exp))
    del nccl
    host = coll[coll["device"].to_numpy() < 0]
    cats = fr.host["cat"].astype(str).to_numpy()
    for r, g in host.groupby("rank"):  # one loop per rank with a CPU backend's collectives
        st = fr.steps[fr.steps["rank"].to_numpy() == r]
        if st.empty:
            continue
        comm = iv.union(g["ts"].to_numpy(np.int64), g["end"].to_numpy(np.int64))
        w = fr.host[(fr.host["rank"].to_numpy() == r) & (cats == CAT_COLLECTIVE_WAIT)]
        exp = iv.union(w["ts"].to_numpy(np.int64), w["end"].to_numpy(np.int64))
        ws, we = st["ts"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
        figs = step_figures(ws, we, comm, exp, None)
        out.append(CommPart(int(r), -1, st["step"].to_numpy(np.int64), ws, we, figs, *exp))
    return out


def gpu_elements(coll: pd.DataFrame, dev: pd.DataFrame, launches: pd.DataFrame, sizes: pd.DataFrame) -> None:
    """Fill `elements` (in place) of the NCCL kernels that lack it from the `record_param_comms` op
    around their launch call (Frames.comm_sizes): where NCCL wrote the size in torch 2.x traces."""
    if not len(sizes) or not len(coll):
        return
    need = np.flatnonzero((coll["device"].to_numpy() >= 0) & (coll["elements"].to_numpy() < 0))
    if not need.size:
        return
    lau = launches.set_index(["rank", "correlation"])
    corr = coll["correlation"].to_numpy(np.float64) if "correlation" in coll.columns else None
    if corr is None:
        return
    for i in need:  # one loop per NCCL kernel without a size (a few per step)
        if np.isnan(corr[i]):
            continue
        try:
            row = lau.loc[(int(coll["rank"].iat[i]), int(corr[i]))]
        except KeyError:
            continue
        if isinstance(row, pd.DataFrame):
            row = row.iloc[0]
        t = int(row["ts"])
        m = (
            (sizes["rank"].to_numpy() == coll["rank"].iat[i])
            & (sizes["tid"].to_numpy() == int(row["tid"]))
            & (sizes["ts"].to_numpy() <= t)
            & (sizes["end"].to_numpy() >= t)
        )
        if m.any():
            coll.iat[i, coll.columns.get_loc("elements")] = int(sizes["elements"].to_numpy()[m][-1])


def communication(parts: list[CommPart], coll: pd.DataFrame, host_steps, devices):
    """The report's Communication (model.Communication) from every rank's CommPart and every collective
    (COLLECTIVE_COLUMNS, with `group` from collective.match_collectives where they were matched):
    the exposed time split into waiting and transfer, the buckets, the slow rank. `host_steps`,
    `devices`: the report's, to say why the slow rank is slow. None without a collective."""
    if not parts:
        return None
    c = arrivals(coll)
    matched = int(c.loc[c["nranks"].to_numpy() > 1].groupby(["name", "group"]).ngroups)
    skew = clock_skew(c)
    if skew:
        c["wait"] = 0
        c["transfer"] = c["end"] - c["ts"]
    ranks = []
    for p in sorted(parts, key=lambda p: (p.rank, p.device)):  # one loop per rank (device)
        mine = c[(c["rank"].to_numpy() == p.rank) & (c["device"].to_numpy() == p.device)]
        ts = mine["ts"].to_numpy(np.int64)
        wait_ns = split_exposed(p.exp_s, p.exp_e, ts, ts + mine["wait"].to_numpy(np.int64), p.ws, p.we)
        steps = tuple(
            CommStep(
                step=int(p.step[i]),
                step_ns=int(p.we[i] - p.ws[i]),
                compute_ns=int(p.figures["compute_ns"][i]),
                comm_ns=int(p.figures["comm_ns"][i]),
                hidden_ns=int(p.figures["hidden_ns"][i]),
                exposed_ns=int(p.figures["exposed_ns"][i]),
                exposed_wait_ns=int(min(wait_ns[i], p.figures["exposed_ns"][i])),
            )
            for i in range(p.step.size)
        )
        ranks.append(
            CommRank(
                rank=p.rank,
                device=p.device,
                steps=steps,
                buckets=tuple(_buckets(mine, p, CommBucket)),
                straggler_rank=_straggler(c, mine),
            )
        )
    return Communication(
        ranks=tuple(ranks), slow_rank=slow_rank(ranks, host_steps, devices), matched=matched, clock_skew=skew
    )


def arrivals(coll: pd.DataFrame) -> pd.DataFrame:
    """The collectives matched across ranks (collective.match_collectives: `group`), each with `nranks`
    (the ranks of its group), `last_start` (when the last rank arrived), its `wait` for that arrival and
    its `transfer` after it (rule 5, DESIGN.md):

        wait_r = clip(last_start − ts_r, 0, dur_r)      transfer_r = dur_r − wait_r

    An unmatched collective (one rank, or no partner in the reference rank) waits for nothing."""
    c = match_collectives(coll) if coll["rank"].nunique() > 1 else coll.assign(group=-1)
    dur = (c["end"] - c["ts"]).to_numpy(np.int64)
    m = c["group"].to_numpy() >= 0
    nranks = np.ones(len(c), np.int64)
    last = c["ts"].to_numpy(np.int64).copy()
    if m.any():
        grp = c[m].groupby(["name", "group"])
        nranks[m] = grp["rank"].transform("nunique").to_numpy()
        last[m] = grp["ts"].transform("max").to_numpy(np.int64)
    wait = np.clip(last - c["ts"].to_numpy(np.int64), 0, dur)
    return c.assign(nranks=nranks, last_start=last, wait=wait, transfer=dur - wait)


def clock_skew(c: pd.DataFrame) -> bool:
    """Whether the ranks' clocks disagree: the ends of one NCCL collective on different ranks lie more
    than CLOCK_SKEW_NS apart (median). An NCCL collective ends at once everywhere; a CPU backend's
    spans do not (each rank finishes its own reduction), so only device collectives tell."""
    g = c[(c["device"].to_numpy() >= 0) & (c["nranks"].to_numpy() > 1)]
    if not len(g):
        return False
    spread = g.groupby(["name", "group"])["end"].agg(lambda x: int(x.max() - x.min()))
    return bool(np.median(spread.to_numpy()) > CLOCK_SKEW_NS)


def _buckets(mine: pd.DataFrame, p: CommPart, make) -> list:
    """The rank's collectives by (name, index in its step), in step order: medians over steps."""
    inside = mine[mine["step"].to_numpy() >= 0].sort_values("ts", kind="stable")
    if not len(inside):
        return []
    # the i-th of its name in its step, modulo the usual count per step (a step whose device work holds
    # two steps' collectives, a host running ahead, numbers its second set from 0 again)
    idx = inside.groupby(["step", "name"]).cumcount().to_numpy()
    per = inside.groupby(["step", "name"]).size().groupby(level="name").median()
    idx = idx % np.maximum(per.reindex(inside["name"]).to_numpy(np.float64).astype(np.int64), 1)
    s, e = inside["ts"].to_numpy(np.int64), inside["end"].to_numpy(np.int64)
    # each instance's exposed time: |[ts, end) ∩ exposed|
    exposed = np.zeros(s.size, np.int64)
    for j in range(s.size):  # one loop per collective of the rank (a few per step)
        _, _, ps, pe = iv.intersect_windows(p.exp_s, p.exp_e, s[j : j + 1], e[j : j + 1])
        exposed[j] = int((pe - ps).sum())
    frame = inside.assign(index=idx, exposed=exposed)
    first = frame.groupby(["name", "index"], sort=False)["ts"].min().sort_values(kind="stable")
    out = []
    for (name, index), _ in first.items():  # one loop per bucket
        g = frame[(frame["name"] == name).to_numpy() & (frame["index"] == index).to_numpy()]
        el = g["elements"].to_numpy(np.int64)
        el = el[el >= 0]
        out.append(
            make(
                name=str(name),
                index=int(index),
                instances=int(len(g)),
                elements=int(np.median(el)) if el.size else None,
                transfer_ms=float(np.median(g["transfer"].to_numpy(np.float64))) / 1e6,
                wait_ms=float(np.median(g["wait"].to_numpy(np.float64))) / 1e6,
                exposed_ms=float(np.median(g["exposed"].to_numpy(np.float64))) / 1e6,
            )
        )
    return out


def _straggler(c: pd.DataFrame, mine: pd.DataFrame) -> Optional[int]:
    """The rank that arrived last at the collectives this rank waited in, weighted by the wait."""
    w = mine[(mine["wait"].to_numpy() > 0) & (mine["nranks"].to_numpy() > 1)]
    if not len(w):
        return None
    last = c[c["group"].to_numpy() >= 0].sort_values("ts", kind="stable").groupby(["name", "group"]).tail(1)
    last = last.set_index(["name", "group"])["rank"]
    tot: dict[int, int] = {}
    for n, g, x in zip(w["name"], w["group"], w["wait"].to_numpy(np.int64)):
        r = int(last.get((n, g), -1))
        if r >= 0 and r != int(mine["rank"].iat[0]):
            tot[r] = tot.get(r, 0) + int(x)
    return max(sorted(tot), key=lambda r: tot[r]) if tot else None


def slow_rank(ranks: list, host_steps, devices):
    """The rank most others name as their straggler (of ranks named equally often, the one its waiters
    wait for longest: two ranks that each name the other are told apart by their waits), with the
    figure in which it exceeds the others' median most: a host state of its step thread on a CPU
    backend, a device figure (busy, an idle cause) on a GPU. None where no rank waits on another for at
    least SLOW_RANK_MIN_SHARE of its step (exposed, median over the waiting ranks)."""
    named = [r.straggler_rank for r in ranks if r.straggler_rank is not None]
    if not named:
        return None

    def waits_on(k: int) -> list[float]:
        return [r.ms_per_step("exposed_wait_ns") for r in ranks if r.straggler_rank == k]

    slow = max(sorted(set(named)), key=lambda k: (named.count(k), float(np.median(waits_on(k)))))
    waits = waits_on(slow)
    step = [r.ms_per_step("step_ns") for r in ranks if r.straggler_rank == slow]
    if float(np.median(waits)) < SLOW_RANK_MIN_SHARE * float(np.median(step)):
        return None  # the ranks arrive within noise of each other: no rank is slow
    figures: dict[int, dict[str, float]] = {}
    gpu = any(r.device >= 0 for r in ranks)
    if gpu:
        for d in devices:
            n = max(d.steps, 1)
            f = figures.setdefault(d.rank, {})
            f["busy"] = f.get("busy", 0.0) + sum(s.busy_ns for s in d.samples) / n / 1e6
            for cause in CAUSES:
                f[f"idle: {cause}"] = (
                    f.get(f"idle: {cause}", 0.0) + sum(s.idle_ns.get(cause, 0) for s in d.samples) / n / 1e6
                )
    else:
        by: dict[int, list] = {}
        for h in host_steps:
            by.setdefault(h.rank, []).append(h)
        for r, hs in by.items():
            figures[r] = {
                f"host: {st}": sum(h.breakdown_ns.get(st, 0) for h in hs) / len(hs) / 1e6
                for st in HOST_STATES
                if st != "collective"
            }
    mine = figures.get(slow)
    others = [f for r, f in figures.items() if r != slow]
    if not mine or not others:
        return SlowRank(slow, float(np.median(waits)) if waits else 0.0, "", 0.0, 0.0)
    excess = {k: v - float(np.median([o.get(k, 0.0) for o in others])) for k, v in mine.items()}
    top = max(sorted(excess), key=lambda k: excess[k])
    if excess[top] <= 0:  # late, yet above the others in no figure: the trace does not say why
        return SlowRank(slow, float(np.median(waits)) if waits else 0.0, "", 0.0, 0.0)
    return SlowRank(
        rank=slow,
        waited_on_ms_per_step=float(np.median(waits)) if waits else 0.0,
        figure=top,
        value_ms_per_step=mine[top],
        others_ms_per_step=mine[top] - excess[top],
    )


__all__ = [
    "HOST_COLLECTIVE_RE",
    "COLLECTIVE_WAIT_NAME",
    "COLLECTIVE_COLUMNS",
    "host_collectives",
    "waits_on_thread",
    "collective_wait_events",
    "collectives_frame",
    "exposed_pieces",
    "step_figures",
    "split_exposed",
    "CommPart",
    "comm_parts",
    "gpu_elements",
    "communication",
    "slow_rank",
    "arrivals",
    "clock_skew",
    "WAKE_TOLERANCE_NS",
    "SLOW_RANK_MIN_SHARE",
]
