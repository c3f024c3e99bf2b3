"""The iterations of a trace that has no ``ProfilerStep`` spans (DESIGN.md "Words": step; issue 37).

Most traces people have were not made with ``prof.step()``: a ``with profile() as prof:`` around 20
forward passes, an inference server's requests, ``generate``'s tokens. Their iterations are found here,
once, by the first rule of `RULES` that finds any; the parser stores them as the step rows and the
analysis finds the same ones again (or those a ``--step REGEX`` names):

    step thread  |ann A|..ops..|ann B|..ops..|ann A|..ops..|ann B|..ops..|ann A|..ops..|ann B|..|
    windows      ^ step 0                    ^ step 1                    ^ step 2
                 (each window runs from one start of the marker to the next)

1. ``marker``: spans whose name matches the user's regex (a ``record_function`` / annotation, a
   module or an op name), the outermost ones on the thread that has most of them.
2. ``annotation``: a top-level ``user_annotation`` that repeats on the step thread, such that the
   sequence of top-level annotations between two of its starts is the same every time.
3. ``module``: the same over the outermost ``nn.Module: …`` python_function events (``with_stack``).
4. ``op_sequence``: the same over the top-level ops (cpu_op, annotation, module): a name that starts a
   block of ops repeated identically (20 forward passes of one model; ``generate``'s decode steps).
5. ``none``: nothing repeats: one window over the trace, and the report says it cannot tell.

"The same every time" (`_consistent`): the windows between consecutive starts of the candidate are
identical token for token, but for the first (a warm-up or a prefill may run other ops), which is kept
as a step when it is at most FIRST_WINDOW_MAX_RATIO times as long, in units, as the others and dropped
otherwise; at least two windows must be identical and the candidate must start MIN_REPEATS times. Of
the candidates that qualify, the one with most starts wins (the shortest period: a name that starts
every second iteration is coarser), then the one that starts first (the iteration's first unit, so a
DataLoader fetch before the forward starts its step as ``prof.step()`` would). A window ends where the
next one starts; the last one of a trace file after its start's median period of top-level work.

Where the units before the first start are the repeated window's tail (the trace began inside the loop
and the anchor is not a pass's first unit: 20 ResNet passes anchored at their one max_pool2d), every start
moves back by that many units (`_rotated`): the first pass is a step and the last one whole. A trace
file's last window with under FRAGMENT of the other windows' median top-level units and of their median
duration is no step (`_fragments`): the loop's exit, e.g. ``generate``'s stopping check after its last
token, or a DataLoader's last fetch that ends the epoch.

What this cannot tell apart, and says nothing wrong about only because it picks the shortest period: a
model whose forward is itself k identical blocks with nothing else between passes repeats at the block,
so the rule finds k steps per pass; name the pass with ``--step``.

The step thread: the host thread with most top-level cpu_ops, autograd engine threads left out (their
ops are the backward's, not the loop's). Only numpy: the parser and the analysis both call `find`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import numpy as np

from tracekit.data.schema import STEP_NAME
from tracekit.errors import TracekitError

# Unit kinds: what a host event is to the finder.
ANNOTATION, MODULE, OP = 0, 1, 2
MODULE_PREFIX = "nn.Module: "  # torch's python tracer names a module's forward so (with_stack traces)
ENGINE_PREFIX = "autograd::engine::evaluate_function"

MIN_REPEATS = 3  # a candidate must start at least this many times
FIRST_WINDOW_MAX_RATIO = 2.0  # a different first window stays a step up to this many units per unit
NGRAM_MAX = 8  # the longest run of units tried as a candidate (`_repeated`)
COVERED = 0.9  # a candidate whose windows cover this share of the units ends the search for longer runs
FRAGMENT = 0.5  # a file's last window with fewer top-level units than this share of the median is no step


@dataclass(frozen=True)
class Rule:
    """One way iterations are found: its name (stable, in the JSON report), and the sentence the report
    says about it (`{marker}`, `{units}` filled in)."""

    name: str
    says: str


RULES = (
    Rule("ProfilerStep", "ProfilerStep spans (prof.step())"),
    Rule("marker", "spans matching --step '{marker}'"),
    Rule("annotation", "repeated annotation '{marker}'"),
    Rule("module", "repeated module '{marker}'"),
    Rule("op_sequence", "repeated op sequence ({units} ops per step, from '{marker}')"),
    Rule("none", "one window: cannot tell (no ProfilerStep, no repeated annotation, module or op sequence)"),
)
RULE = {r.name: r for r in RULES}


@dataclass(frozen=True)
class Units:
    """The host events the finder reads, of one rank: annotations, modules and cpu_ops (`kind`), their
    thread, times (ns) and names (`code` into `names`)."""

    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    code: np.ndarray
    names: Sequence[str]

    def take(self, rows: np.ndarray) -> Units:
        return Units(
            self.pid[rows],
            self.tid[rows],
            self.ts[rows],
            self.end[rows],
            self.kind[rows],
            self.code[rows],
            self.names,
        )


@dataclass(frozen=True)
class Iterations:
    """What `find` found on one rank: the rule, the marker (a name, or the user's regex), the thread, and
    the windows (`starts`, `ends`, ns; `names`: the marker event's name at each start)."""

    rule: str
    marker: Optional[str] = None
    pid: Optional[int] = None
    tid: Optional[int] = None
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    names: tuple[str, ...] = ()
    units: int = 0  # units per step (op_sequence)

    @property
    def steps(self) -> int:
        return int(self.starts.size)

    def says(self) -> str:
        return RULE[self.rule].says.format(marker=self.marker, units=self.units)

    def to_json(self) -> dict:
        return {
            "rule": self.rule,
            "marker": self.marker,
            "steps": self.steps,
            "units_per_step": self.units,
            "says": self.says(),
        }


NOTHING = Iterations("none")


def file_starts(traces: Sequence[dict] | None) -> dict:
    """rank -> the start times of its trace files (the capture metadata's `traces[].host_span_ns`), for
    the ranks with several files (profiler cycles); {} when the metadata does not say."""
    out: dict = {}
    for t in traces or []:
        span = t.get("host_span_ns")
        if span:
            out.setdefault(int(t.get("rank", 0)), []).append(int(span[0]))
    return {r: sorted(v) for r, v in out.items() if len(v) > 1}


def compile_marker(regex: str) -> re.Pattern:
    """The user's --step REGEX, compiled (one line naming it when it is not a regex)."""
    try:
        return re.compile(regex)
    except re.error as e:
        raise TracekitError(f"--step {regex!r} is not a regular expression: {e}") from None


def find(units: Units, marker: Optional[re.Pattern] = None, breaks: Sequence[int] = ()) -> Iterations:
    """The iterations of one rank's `units` (module docstring). `marker`: the user's --step pattern
    (TracekitError when nothing matches). `breaks`: the starts of the rank's trace files after its first
    (a window never spans the gap between two profiler cycles)."""
    if marker is not None:
        return _by_marker(units, marker, breaks)
    thread = _step_thread(units)
    if thread is None:
        return NOTHING
    mine = units.take(np.flatnonzero((units.pid == thread[0]) & (units.tid == thread[1])))
    order = np.lexsort((-mine.end, mine.ts))
    mine = mine.take(order)
    top = _top_level(mine.ts, mine.end)
    not_steps = _excluding_steps(mine)
    for rule, kinds in (("annotation", (ANNOTATION,)), ("module", (MODULE,)), ("op_sequence", None)):
        keep = top & not_steps if kinds is None else top & not_steps & np.isin(mine.kind, kinds)
        seq = np.flatnonzero(keep)
        found = _repeated(mine, seq)
        if found is None:
            continue
        first, m = found
        starts = mine.ts[first]
        ends = _ends(starts, mine.ts[top], mine.end[top], mine.end[first], breaks)
        keep = ~_fragments(starts, ends, mine.ts[top], breaks)
        first, starts, ends = first[keep], starts[keep], ends[keep]
        return Iterations(
            rule,
            mine.names[int(mine.code[first[0]])],
            thread[0],
            thread[1],
            starts,
            ends,
            tuple(mine.names[int(c)] for c in mine.code[first]),
            m if rule == "op_sequence" else 0,
        )
    return NOTHING


def _excluding_steps(u: Units) -> np.ndarray:
    """Every unit but ProfilerStep spans (a trace with some is not the finder's)."""
    bad = np.array([bool(STEP_NAME.match(n)) for n in u.names] + [False], bool)
    return ~bad[np.where(u.code >= 0, u.code, len(u.names))]


def _by_marker(units: Units, marker: re.Pattern, breaks: Sequence[int]) -> Iterations:
    hit_name = np.array([marker.search(n) is not None for n in units.names] + [False], bool)
    hit = hit_name[np.where(units.code >= 0, units.code, len(units.names))]
    if not hit.any():
        raise TracekitError(
            f"--step {marker.pattern!r} matches no annotation, module or op name"
            + _repeated_names(units)
            + "; name a record_function or annotation that starts each step"
        )
    pairs, counts = np.unique(np.stack([units.pid[hit], units.tid[hit]], axis=1), axis=0, return_counts=True)
    pid, tid = (int(x) for x in pairs[int(np.argmax(counts))])
    on = units.take(np.flatnonzero((units.pid == pid) & (units.tid == tid)))
    order = np.lexsort((-on.end, on.ts))
    on = on.take(order)
    hit_on = hit_name[np.where(on.code >= 0, on.code, len(on.names))]
    rows = np.flatnonzero(hit_on)
    outer = rows[_top_level(on.ts[rows], on.end[rows])]  # a match inside an earlier match is not a step
    top = _top_level(on.ts, on.end)
    starts = on.ts[outer]
    ends = _ends(starts, on.ts[top], on.end[top], on.end[outer], breaks)
    names = tuple(on.names[int(c)] for c in on.code[outer])
    return Iterations("marker", marker.pattern, pid, tid, starts, ends, names)


def _repeated_names(units: Units, most: int = 5) -> str:
    """'; names that repeat: a (40), b (40)' for the error of a --step that matches nothing."""
    if not units.code.size:
        return ""
    codes, counts = np.unique(units.code[units.kind != OP], return_counts=True)
    if not codes.size:
        codes, counts = np.unique(units.code, return_counts=True)
    order = np.argsort(-counts, kind="stable")[:most]
    listed = [f"{units.names[int(codes[i])]} ({int(counts[i])})" for i in order if counts[i] > 1]
    return f"; names that repeat: {', '.join(listed)}" if listed else ""


def _step_thread(units: Units) -> Optional[tuple[int, int]]:
    """The thread with most top-level cpu_ops (autograd engine threads left out), else with most units."""
    if not units.ts.size:
        return None
    best: Optional[tuple[int, int]] = None
    best_key: tuple = ()
    pairs = np.unique(np.stack([units.pid, units.tid], axis=1), axis=0)
    for pid, tid in pairs.tolist():  # one loop per host thread
        on = units.take(np.flatnonzero((units.pid == pid) & (units.tid == tid)))
        order = np.lexsort((-on.end, on.ts))
        ts, end, kind, code = on.ts[order], on.end[order], on.kind[order], on.code[order]
        top = _top_level(ts, end) & (kind == OP)
        names = [on.names[int(c)] for c in code[top]]
        engine = sum(n.startswith(ENGINE_PREFIX) for n in names)
        if names and engine * 2 > len(names):
            continue
        key = (len(names), ts.size, -int(ts[0]))
        if best is None or key > best_key:
            best, best_key = (int(pid), int(tid)), key
    return best


def _top_level(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Of events sorted by (ts, -end): those that start at or after every earlier one has ended."""
    if not ts.size:
        return np.zeros(0, bool)
    reach = np.maximum.accumulate(end)
    return np.r_[True, ts[1:] >= reach[:-1]]


def _repeated(u: Units, seq: np.ndarray) -> Optional[tuple[np.ndarray, int]]:
    """(the rows of `u` that start each iteration, units per iteration) of the token sequence `seq`
    (rows of `u` in time order), or None (module docstring: the candidates and `_consistent`).

    A candidate is a run of n units (n = 1, then 2, … NGRAM_MAX), anchored at its last unit: a pass of
    Linear, ReLU, Linear, ReLU, Linear repeats no single op once per pass, but the pair (Linear, Linear)
    where one pass ends and the next begins. Of the candidates whose windows are consistent, the one
    whose windows cover most units wins (the loop that explains most of the trace, not 100 identical
    set-up ops before it), then the one with most starts (the shortest period), then the earliest."""
    if seq.size < MIN_REPEATS:
        return None
    tokens = u.kind[seq].astype(np.int64) * (len(u.names) + 1) + u.code[seq]
    _, tokens = np.unique(tokens, return_inverse=True)
    tokens = tokens.astype(np.int64)
    ids = tokens
    best: Optional[tuple[tuple, np.ndarray, int]] = None
    for n in range(1, min(NGRAM_MAX, seq.size) + 1):
        if n > 1:  # the n-grams: the (n-1)-gram at i and the unit at i + n - 1
            _, ids = np.unique(ids[:-1] * (tokens.size + 1) + tokens[n - 1 :], return_inverse=True)
        for pos, m in _consistent_candidates(tokens, ids.astype(np.int64), n - 1):
            key = (pos.size * m, pos.size, -int(pos[0]))
            if best is None or key > best[0]:
                best = (key, pos, m)
        if best is not None and best[0][0] >= COVERED * seq.size:
            break
    return None if best is None else (seq[_rotated(tokens, best[1], best[2])], best[2])


def _rotated(tokens: np.ndarray, pos: np.ndarray, m: int) -> np.ndarray:
    """`pos` moved back by r units where the r < m units before the first start, all there are, are the
    tail of the repeated window and every window is that window (module docstring); else `pos`."""
    r = int(pos[0])
    if r == 0 or r >= m or pos.size < 2 or np.any(np.diff(pos) != m):
        return pos
    window = tokens[pos[1] : pos[1] + m]
    same = np.array_equal(tokens[pos[0] : pos[0] + m], window)
    return pos - r if same and np.array_equal(tokens[:r], window[m - r :]) else pos


def _fragments(starts: np.ndarray, ends: np.ndarray, top_ts: np.ndarray, breaks: Sequence[int]) -> np.ndarray:
    """A mask of the windows that are no step: a trace file's last window where both the top-level units
    from its start to the file's end and its duration are under FRAGMENT × the median of the windows
    that end at the next start (either alone is no fragment: a loop whose marker follows the forward
    leaves its last window without one, yet with most of a step's time; a slow last step is cut at the
    median period, yet holds a step's units)."""
    n = starts.size
    out = np.zeros(n, bool)
    if n < 2:
        return out
    cuts = np.sort(np.asarray(breaks, np.int64))
    file_of = np.searchsorted(cuts, starts, side="right")
    last = np.r_[file_of[1:] != file_of[:-1], True]
    if last.all():
        return out
    order = np.sort(top_ts)
    file_end = np.r_[cuts, np.iinfo(np.int64).max][file_of]
    held = np.searchsorted(order, np.where(last, file_end, ends), side="left")
    held = held - np.searchsorted(order, starts, side="left")
    dur = ends - starts
    out[last] = (held[last] < FRAGMENT * np.median(held[~last])) & (
        dur[last] < FRAGMENT * np.median(dur[~last])
    )
    return out


def _consistent_candidates(
    tokens: np.ndarray, ids: np.ndarray, shift: int
) -> Iterator[tuple[np.ndarray, int]]:
    """(starts, units per window) of each candidate of `ids` (an id per position, anchored `shift`
    units later) whose windows are consistent (`_consistent`), with the identical windows before its
    first start added (`_extended`)."""
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    by_value = np.argsort(inverse, kind="stable")  # each value's positions, in order, one run per value
    run_start = np.r_[0, np.cumsum(counts)[:-1]]
    for v in np.flatnonzero(counts >= MIN_REPEATS):
        pos = by_value[run_start[v] : run_start[v] + counts[v]] + shift
        kept = _consistent(tokens, pos)
        if kept is not None:
            yield _extended(tokens, *kept), kept[1]


def _extended(tokens: np.ndarray, pos: np.ndarray, m: int) -> np.ndarray:
    """`pos` with the starts of the identical windows just before its first (an n-gram's anchor misses
    the first pass: no pass ends before it)."""
    window = tokens[pos[-1] - m : pos[-1]] if pos.size > 1 else tokens[pos[0] : pos[0] + m]
    extra = []
    first = int(pos[0])
    while first - m >= 0 and np.array_equal(tokens[first - m : first], window):
        first -= m
        extra.append(first)
    return np.r_[np.asarray(extra[::-1], np.int64), pos] if extra else pos


def _consistent(tokens: np.ndarray, pos: np.ndarray) -> Optional[tuple[np.ndarray, int]]:
    """(the positions that start an iteration, units per iteration) when the windows between the
    consecutive `pos` are identical but for the first (module docstring), else None."""
    widths = np.diff(pos)
    inner = widths[1:]
    if inner.size == 0 or np.any(inner != inner[0]):
        return None
    m = int(inner[0])
    rows = tokens[pos[1:-1, None] + np.arange(m)]  # the windows after the first, one per row
    if not np.all(rows == rows[0]):
        return None
    same_first = widths[0] == m and np.array_equal(tokens[pos[0] : pos[0] + m], rows[0])
    if same_first:
        return pos, m
    if rows.shape[0] < 2:  # a different first window beside only one other: no pattern yet
        return None
    return (pos if widths[0] <= FIRST_WINDOW_MAX_RATIO * m else pos[1:]), m


def _ends(
    starts: np.ndarray, top_ts: np.ndarray, top_end: np.ndarray, own_end: np.ndarray, breaks: Sequence[int]
) -> np.ndarray:
    """Each window's end: the next start, but for the last window of a trace file, which ends with the
    last top-level unit that starts within the median period after its start (at least its own end)."""
    n = starts.size
    ends = np.empty(n, np.int64)
    if n == 0:
        return ends
    file_of = np.searchsorted(np.sort(np.asarray(breaks, np.int64)), starts, side="right")
    last = np.r_[file_of[1:] != file_of[:-1], True]
    ends[:-1] = starts[1:]
    periods = np.diff(starts)[~last[:-1]]
    period = int(np.median(periods)) if periods.size else 0
    for i in np.flatnonzero(last):  # one per trace file
        s = int(starts[i])
        within = (top_ts >= s) & (top_ts < s + period)
        ends[i] = max(int(own_end[i]), int(top_end[within].max()) if within.any() else s)
    return ends
