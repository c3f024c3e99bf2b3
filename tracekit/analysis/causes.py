"""The causes of device idle time and the host states, one row each (DESIGN.md, "Attribution of GPU idle
time" and "Adding a cause").

A row is a cause: its stable name (the JSON's key), whether it is a host state (what a host thread is
doing, rule 3; `queued` is the one device-side cause), how host events put a thread in it (`events`), what
a what-if scenario does to it, whether a CUDA graph replay keeps it, colours and help text. The rows are
in priority order: where a thread's events nest, the innermost state is the first row's of those that
cover the instant (DESIGN.md rule 3), and reports list causes in this order. Attribution, the host
breakdown, the replay graph, scenarios, savings, renderers, exporters and the JSON schema read them.

State codes (the small integers the vectorised rules compare) follow from the rows: a state's code is
its rank from the lowest priority (the last row, the default where no event covers a thread) upwards,
so a higher code wins where states nest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from tracekit.analysis.calls import HOLDS, QUEUES, WAITS, CallKind
from tracekit.data import schema as S

# The DataLoader iterator's fetch, a user_annotation such as
# `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` (group 1: the iterator class).
DATALOADER_RE = re.compile(r"^enumerate\(DataLoader\)#(\w+)\.__next__")
# Framework ops that read device memory on the host (they hold a copy and a stream sync).
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
RUNTIME_CATS = (S.CAT_RUNTIME, S.CAT_DRIVER)
# The category of the derived host events that put a step thread in the `collective` state: not a Kineto
# category; the analysis makes them (tracekit.analysis.comm.collective_waits) and no table row holds one.
CAT_COLLECTIVE_WAIT = "tracekit:collective_wait"


@dataclass(frozen=True)
class Events:
    """One kind of host event that puts its thread in a row's state: events of one of `cats`; of those,
    runtime calls only of the kinds `calls` (tracekit.analysis.calls) and events only whose name
    `name` accepts, where given; only in captures with device activity if `with_device`. `replay_as`:
    the state the what-if replay scales their time as, where it differs (an `aten::item` is `sync` to
    the attribution, but the replay derives its wait from the runtime sync call inside it: the op's
    own time is framework work)."""

    cats: tuple[str, ...]
    calls: tuple[CallKind, ...] = ()
    name: Optional[Callable[[str], object]] = None
    with_device: bool = False
    replay_as: Optional[str] = None


@dataclass(frozen=True)
class Cause:
    """One cause of device idle time (a row of CAUSE_ROWS)."""

    name: str  # stable: the JSON's key, `--set NAME=F`
    help: str  # one line: what the host (or the device) was doing
    state: bool  # a host state (rule 3's slicing, the host breakdown); False: device-side (`queued`)
    events: tuple[Events, ...] = ()  # what puts a thread in the state; none: the default state
    # what `whatif --set NAME=F` does: "segments" scales the host time in the state by F, "waits" (F = 0
    # or 1) drops the waits of blocking calls (their own time stays), "" cannot be set
    scenario: str = ""
    graph_keeps: bool = True  # a CUDA graph replay still spends the state's host time (whatif/cudagraph.py)
    drained: bool = True  # a sync drain (rule 4) charges its time to `sync`
    trace_colour: str = "grey"  # the annotated trace's slice colour (Catapult's reserved names)
    plot_colour: str = "#8c8c8c"  # the diff plot's colour


CAUSE_ROWS: tuple[Cause, ...] = (
    Cause(
        "queued",
        "the next work was already launched when the device went idle: device-side latency or a "
        "dependency (a stream or event wait, a peer)",
        state=False,
        trace_colour="grey",
        plot_colour="#8c8c8c",
    ),
    Cause(
        "dataloader",
        "the host thread was inside a DataLoader __next__ (fetching the batch)",
        state=True,
        events=(Events((S.CAT_USER_ANNOTATION,), name=DATALOADER_RE.match),),
        scenario="segments",
        drained=False,
        trace_colour="yellow",
        plot_colour="#dd8452",
    ),
    Cause(
        "sync",
        "the host thread was blocked in a call that waits for the device (a synchronize, a blocking "
        "copy, an op such as aten::item), or the gap is a sync drain",
        state=True,
        events=(
            Events(RUNTIME_CATS, calls=WAITS),
            # an aten::item on a CPU tensor waits for no device: sync ops count only where there is one
            Events((S.CAT_CPU_OP,), name=SYNC_OPS.__contains__, with_device=True, replay_as="framework"),
        ),
        scenario="waits",
        trace_colour="terrible",
        plot_colour="#c44e52",
    ),
    Cause(
        "collective",
        "the host thread was blocked waiting for a collective that a CPU backend (gloo) runs on its own "
        "threads (DDP's reducer waiting for a gradient bucket): the trace shows a gap on the thread that "
        "ends when the collective does (tracekit.analysis.comm)",
        state=True,
        events=(Events((CAT_COLLECTIVE_WAIT,)),),
        trace_colour="cq_build_attempt_failed",
        plot_colour="#64b5cd",
    ),
    Cause(
        "runtime",
        "the host thread was blocked in a runtime or driver call that neither launches work nor waits "
        "for the device: allocation, context or module creation, a query, a call tracekit does not know",
        state=True,
        events=(Events(RUNTIME_CATS, calls=HOLDS),),
        scenario="segments",
        graph_keeps=False,
        trace_colour="thread_state_iowait",
        plot_colour="#55a868",
    ),
    Cause(
        "launch",
        "the host thread was inside a call that queues device work (a kernel or graph launch, an "
        "asynchronous copy, an event record), or the work was launched but not yet started",
        state=True,
        events=(Events(RUNTIME_CATS, calls=QUEUES),),
        scenario="segments",
        graph_keeps=False,
        trace_colour="olive",
        plot_colour="#8172b3",
    ),
    Cause(
        "framework",
        "the host thread was inside a framework op (cpu_op: dispatcher and CPU-side op work)",
        state=True,
        events=(Events((S.CAT_CPU_OP,)),),
        scenario="segments",
        graph_keeps=False,
        trace_colour="bad",
        plot_colour="#937860",
    ),
    Cause(
        "interpreter",
        "the host thread was between framework calls: Python running",
        state=True,
        scenario="segments",
        graph_keeps=False,
        trace_colour="rail_animation",
        plot_colour="#da8bc3",
    ),
)

CAUSES: tuple[str, ...] = tuple(c.name for c in CAUSE_ROWS)
BY_NAME: dict[str, Cause] = {c.name: c for c in CAUSE_ROWS}
# What a host thread can be doing, innermost first (the host breakdown's order).
HOST_STATES: tuple[str, ...] = tuple(c.name for c in CAUSE_ROWS if c.state)
# State codes: STATE_NAMES[code], the lowest priority first.
STATE_NAMES: tuple[str, ...] = HOST_STATES[::-1]
STATE: dict[str, int] = {name: code for code, name in enumerate(STATE_NAMES)}
# The causes a what-if scenario may set (`--set CAUSE=F`).
SCALED_CAUSES: tuple[str, ...] = tuple(c.name for c in CAUSE_ROWS if c.scenario)
# state code → cause code (index into CAUSES)
STATE_TO_CAUSE = np.array([CAUSES.index(name) for name in STATE_NAMES], dtype=np.int64)
# The state where no event covers a thread: the last row's.
DEFAULT_STATE = 0
assert not BY_NAME[STATE_NAMES[DEFAULT_STATE]].events, "the lowest-priority state is recognised by no event"
assert len(BY_NAME) == len(CAUSE_ROWS), "a cause is in the table twice"


@dataclass(frozen=True)
class Family:
    """One `Events` of a row, numbered: each host event belongs to at most one family (the highest
    priority one that recognises it), and a thread's state timeline is built from the families'
    intervals."""

    events: Events
    state: int  # the attribution's state code
    replay: int  # the state code the what-if replay scales it as


# Every row's events, the lowest priority first (a later family wins where an event matches several).
FAMILIES: tuple[Family, ...] = tuple(
    Family(ev, STATE[name], STATE[ev.replay_as or name])
    for name in STATE_NAMES
    for ev in BY_NAME[name].events
)
# family number → state code, and → replay state code; index -1 (no family) gives -1
FAMILY_STATE = np.array([f.state for f in FAMILIES] + [-1], dtype=np.int8)
FAMILY_REPLAY = np.array([f.replay for f in FAMILIES] + [-1], dtype=np.int8)


def cause_code(name: str) -> int:
    """The index of a cause in CAUSES (what the attribution's arrays hold)."""
    return CAUSES.index(name)


def states_where(pred: Callable[[Cause], bool]) -> tuple[int, ...]:
    """The state codes of the host states whose row satisfies `pred`."""
    return tuple(STATE[name] for name in STATE_NAMES if pred(BY_NAME[name]))


__all__ = [
    "Cause",
    "Events",
    "Family",
    "CAUSE_ROWS",
    "CAUSES",
    "BY_NAME",
    "HOST_STATES",
    "STATE_NAMES",
    "STATE",
    "SCALED_CAUSES",
    "STATE_TO_CAUSE",
    "DEFAULT_STATE",
    "FAMILIES",
    "FAMILY_STATE",
    "FAMILY_REPLAY",
    "DATALOADER_RE",
    "CAT_COLLECTIVE_WAIT",
    "SYNC_OPS",
    "cause_code",
    "states_where",
]
