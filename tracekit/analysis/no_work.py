"""Where a server had nothing to do (issue 37): the stretches of a step thread outside every request.

An inference server's trace is a few requests with nothing between them: the device idles because no
request came, not because its host held it back. Read by rule 3 that time is `interpreter` (no event
covers the host thread), and a server looks Python-bound. It is `no_work` where the trace says what
work is: its step thread's top-level annotations (a request, `execute_model`, `step[DECODE bs=32]`, the
user's `record_function`) hold its work, i.e. cover at least NO_WORK_COVERAGE of the thread's top-level
framework-op time; outside every one of them the thread had no work:

    host T   |== request 1 (ops inside) ==|      (no event)       |== request 2 ==|
    device   ===k===k====k=====k===]              idle                [===k===k
                                     ^ no_work: outside every request, nothing queued ^

Only the uncovered time is `no_work`: an op, a runtime call or a DataLoader fetch outside the requests
keeps its own state (it is work), and the attribution's earlier rules come first, so a gap whose next
work was already launched stays `queued` and a launched-not-started tail stays `launch`. A sync drain
(rule 4: the host blocked in a sync when the device went idle) does not turn it into `sync`: a server
that ends each request reading its tokens back would otherwise have all its waiting for requests charged
to that read. Steps made of ProfilerStep spans have none: a training loop's steps are all work.

Pure: `no_work_spans(host, steps, rules)` gives the stretches per (rank, pid, tid), in the steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.data import schema as S

NO_WORK_COVERAGE = 0.9  # the annotations hold this share of the step thread's top-level op time, at least
# torch's own record_function spans that mark no request: the step and the DataLoader fetch
_NOT_WORK = ("ProfilerStep#", "enumerate(DataLoader)#")
_COLUMNS = ("rank", "pid", "tid", "ts", "end")


def no_work_spans(host: pd.DataFrame, steps: pd.DataFrame, rules: dict) -> pd.DataFrame:
    """The no-work stretches (module docstring) of each rank whose steps are not ProfilerStep spans
    (`rules`: rank -> parse.iterations.Iterations), on its step thread, inside its steps."""
    out = []
    for r, st in steps.groupby("rank"):  # one loop per rank
        rule = rules.get(int(r))
        if rule is None or rule.rule == "ProfilerStep" or not len(st):
            continue
        pid, tid = int(st["pid"].iloc[0]), int(st["tid"].iloc[0])
        mine = host[(host["rank"] == r) & (host["pid"] == pid) & (host["tid"] == tid)]
        s, e = _work(mine)
        if s is None:
            continue
        ws, we = st["ts"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
        gs, ge = iv.complement(s, e)
        _, _, ps, pe = iv.intersect_windows(gs, ge, ws, we)
        out.append(pd.DataFrame({"rank": int(r), "pid": pid, "tid": tid, "ts": ps, "end": pe}))
    if not out:
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in _COLUMNS})
    return pd.concat(out, ignore_index=True)


def _work(thread: pd.DataFrame) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The union of the thread's top-level work annotations, when they hold its work (module
    docstring), else (None, None)."""
    ev = thread[thread["cat"].isin((S.CAT_USER_ANNOTATION, S.CAT_CPU_OP))].sort_values(
        ["ts", "end"], ascending=[True, False]
    )
    if not len(ev):
        return None, None
    ts, end = ev["ts"].to_numpy(np.int64), ev["end"].to_numpy(np.int64)
    top = np.r_[True, ts[1:] >= np.maximum.accumulate(end)[:-1]]
    names = ev["name"].astype(str).to_numpy()
    is_ann = (ev["cat"] == S.CAT_USER_ANNOTATION).to_numpy()
    work = top & is_ann & ~np.array([n.startswith(_NOT_WORK) for n in names], bool)
    if not work.any():
        return None, None
    s, e = iv.union(ts[work], end[work])
    # the top-level ops' time, and how much of it the work annotations hold
    ops = ev[(ev["cat"] == S.CAT_CPU_OP).to_numpy()]
    os_, oe = ops["ts"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    order = np.lexsort((-oe, os_))
    os_, oe = os_[order], oe[order]
    otop = np.r_[True, os_[1:] >= np.maximum.accumulate(oe)[:-1]] if os_.size else np.zeros(0, bool)
    us, ue = iv.union(os_[otop], oe[otop])
    total = int((ue - us).sum())
    held = int(iv.total_overlap(us, ue, s, e).sum()) if total else 0
    if total and held < NO_WORK_COVERAGE * total:
        return None, None
    return s, e
