"""Where a server had nothing to do (issue 37): the stretches between requests, which lie in no step.

An inference server's trace is a few requests with nothing between them: the device idles because no
request came, not because its host held it back. Read as part of a step, rule 3 calls that time
`interpreter` (no event covers the host thread) and a server looks Python-bound. So where the steps are
a server's requests, the stretch before each request in which its thread ran nothing is *no work*: it
ends the previous step and belongs to none, as the gap between two profiler cycles does (DESIGN.md
"Words": each request starts a cycle), and the report names its total:

    host T   |== request 1 (ops inside) ==|-post-|       (no event)        |== request 2 ==|
    device   ===k===k====k=====k===]                                         [===k===k
             ^ step 1 ............................^ no work: in no step     ^ step 2

A stretch is no work when all of these hold (else the steps run from one start to the next as always):
- the steps were found by a repeated annotation or a --step marker (not ProfilerStep, whose windows
  are a training loop's, nor a repeated op sequence or module, which are not requests);
- the step thread's top-level annotations hold its work: at least NO_WORK_COVERAGE of its top-level
  framework-op time lies inside them (a training loop's `Optimizer.step` spans hold little of it);
- it is the event-free stretch just before a step starts, at least NO_WORK_MIN_NS long: no cpu_op,
  annotation or runtime call of the thread covers any of it (python_function frames, which a server's
  polling loop spans, do not count); ops after a request (post-processing) stay in its step.
Nothing queued is then not a condition but a consequence: a step ends when its device work is done too
(steps.bounds), so device work that runs into the stretch keeps the previous step going.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis import intervals as iv
from tracekit.analysis.causes import DATALOADER_RE, RUNTIME_CATS
from tracekit.data import schema as S

NO_WORK_COVERAGE = 0.9  # the annotations hold this share of the step thread's top-level op time, at least
NO_WORK_MIN_NS = 1_000_000  # an event-free stretch shorter than 1 ms before a step is the loop's own time
# the rules whose steps may be requests (parse.iterations.RULES)
REQUEST_RULES = ("annotation", "marker")


def _not_work(name: str) -> bool:
    """torch's own record_function spans, which mark no request: the step and the DataLoader fetch."""
    return S.STEP_NAME.match(name) is not None or DATALOADER_RE.match(name) is not None


@dataclass(frozen=True)
class Cut:
    """One rank's windows cut where no work comes before a step: the new window ends, and the no-work
    stretches (start, end), one per cut window (the window before it ends at its start)."""

    ends: np.ndarray
    cut: np.ndarray  # bool per window: followed by a no-work stretch (the next window starts a cycle)
    stretch_ts: np.ndarray
    stretch_end: np.ndarray


def cut_windows(ws: np.ndarray, we: np.ndarray, thread: pd.DataFrame, rule: str) -> Cut | None:
    """The cut of one rank's windows (`ws`, `we`: disjoint, sorted, from one start to the next) given its
    step thread's host events (`thread`), or None where the module docstring's conditions fail."""
    if rule not in REQUEST_RULES or ws.size < 2:
        return None
    own = thread[thread["cat"].isin((S.CAT_USER_ANNOTATION, S.CAT_CPU_OP, *RUNTIME_CATS))]
    if not len(own) or not _requests_hold_the_work(own):
        return None
    s, e = iv.union(own["ts"].to_numpy(np.int64), own["end"].to_numpy(np.int64))
    # the last event end before each step start (from the second): the stretch [last, start) is event-free
    nxt = ws[1:]
    k = np.searchsorted(s, nxt, side="left") - 1  # the last busy interval starting before the step
    last = np.where(k >= 0, np.minimum(e[np.maximum(k, 0)], nxt), ws[:-1])
    last = np.maximum(last, ws[:-1])  # never before the window's own start
    cut = np.r_[(nxt - last) >= NO_WORK_MIN_NS, False]
    if not cut.any():
        return None
    ends = we.copy()
    ends[:-1] = np.where(cut[:-1], last, we[:-1])
    return Cut(ends, cut, last[cut[:-1]], nxt[cut[:-1]])


def _requests_hold_the_work(own: pd.DataFrame) -> bool:
    """Whether the thread's top-level annotations (torch's step and fetch spans aside) hold at least
    NO_WORK_COVERAGE of its cpu_ops' time (the union of its ops)."""
    ev = own[own["cat"].isin((S.CAT_USER_ANNOTATION, S.CAT_CPU_OP))]
    ts, end = ev["ts"].to_numpy(np.int64), ev["end"].to_numpy(np.int64)
    order = np.lexsort((-end, ts))
    ts, end = ts[order], end[order]
    top = np.r_[True, ts[1:] >= np.maximum.accumulate(end)[:-1]] if ts.size else np.zeros(0, bool)
    names = ev["name"].astype(str).to_numpy()[order]
    is_ann = (ev["cat"] == S.CAT_USER_ANNOTATION).to_numpy()[order]
    work = top & is_ann & ~np.array([_not_work(n) for n in names], bool)
    if not work.any():
        return False
    s, e = iv.union(ts[work], end[work])
    us, ue = iv.union(ts[~is_ann], end[~is_ann])  # the ops' time
    total = int((ue - us).sum())
    held = int(iv.total_overlap(s, e, us, ue).sum())
    return held >= NO_WORK_COVERAGE * total
