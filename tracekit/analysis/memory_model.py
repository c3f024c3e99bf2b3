"""The results of the device-memory analysis (tracekit.analysis.memory): frozen dataclasses, part of the
Report (`Report.memory`), written to and read back from its JSON like the rest of it.

Bytes are integers; times are ns from the start of the step they fall in. Every figure of a device is
derived from its per-step samples (`MemoryStep`), so `tracekit diff` can give each one an interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional


@dataclass(frozen=True)
class Category:
    """One kind of device memory: how the analysis recognises a block of it, and whether it grows with
    the samples of a micro-batch (what the memory what-ifs scale, tracekit.whatif.memory)."""

    name: str
    recognised: str
    per_sample: bool
    label: str = ""  # how reports name it (default: the name with spaces)

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")


# The categories of allocated memory, in the order reports list them. Each block of a device's trace is
# exactly one of them (tracekit.analysis.memory, `classify`), so at any instant they sum to the
# allocator's allocated total; RESERVE is what the allocator holds beyond it.
CATEGORIES: tuple[Category, ...] = (
    Category(
        "parameters",
        "held before the trace began and never freed in it, up to the parameter bytes the capture found on "
        "the device (manifest `memory.model`)",
        False,
    ),
    Category(
        "gradients",
        "allocated in backward (inside an autograd::engine::evaluate_function op, or the step thread's "
        "backward window) and still alive when that backward ends; or held before the trace and freed in "
        "Optimizer.zero_grad; or held before the trace up to the gradient bytes the capture found kept "
        "between steps",
        False,
    ),
    Category(
        "optimizer_state",
        "allocated inside Optimizer.step and still alive when it returns; or held before the trace up to "
        "the optimizer state the capture found (less what the trace saw allocated)",
        False,
    ),
    Category(
        "activations",
        "allocated outside backward and the optimizer and freed inside a backward: saved for backward",
        True,
    ),
    Category(
        "temporaries",
        "allocated and freed within one phase of one step (forward, one backward, one Optimizer.step)",
        True,
    ),
    Category(
        "inputs_outputs",
        "allocated in a step outside backward and the optimizer, alive past that step's end and not freed "
        "in a backward (the batch, the loss, outputs the loop keeps); or held before the trace and freed "
        "in it other than by zero_grad (the previous step's)",
        True,
        "inputs/outputs",
    ),
    Category(
        "unattributed",
        "held before the trace and never freed in it beyond what the capture's record of the model names "
        "(buffers, library workspaces, caches), or all of it without that record",
        False,
    ),
)
CATEGORY_NAMES: tuple[str, ...] = tuple(c.name for c in CATEGORIES)
RESERVE = "reserve"  # reserved by the caching allocator and not allocated (Total Reserved - Total Allocated)
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "outside")


@dataclass(frozen=True)
class MemoryStep:
    """One step (host window) of one device: allocated and reserved bytes over it, and at its peak the
    allocated bytes by category (summing exactly to `peak_allocated`)."""

    step: int
    start_ns: int
    dur_ns: int
    allocated_start: int
    allocated_end: int
    peak_allocated: int
    peak_reserved: int
    peak_at_ns: int  # ns from the step's start to its peak
    peak_phase: str
    peak_op: Optional[str]
    by_category: Mapping[str, int]
    reserve_at_peak: int  # reserved minus allocated at the peak


@dataclass(frozen=True)
class LiveBlock:
    """A block alive at the peak: its size, category and where it was allocated and freed."""

    bytes: int
    category: str
    op: Optional[str]  # innermost cpu_op around its allocation (None: before the trace, or no op)
    top_op: Optional[str]  # the outermost cpu_op around it (what the step called, e.g. aten::linear)
    phase: str  # of its allocation; "before" for a block held before the trace began
    alloc_step: Optional[int]
    alloc_at_ns: Optional[int]  # ns into its step (None: before the trace, or outside steps)
    free_step: Optional[int]
    free_at_ns: Optional[int]  # None: not freed while the trace ran


@dataclass(frozen=True)
class MemoryCheck:
    """Events that do not add up, counted (never turned into negative memory)."""

    events: int = 0
    frees_before_trace: int = 0  # frees of blocks allocated before the trace began (normal, counted)
    frees_before_trace_bytes: int = 0
    unexplained_free_bytes: int = 0  # of those, more than the trace's start held: impossible
    double_allocations: int = 0  # an address allocated again before its free
    double_frees: int = 0  # an address freed again with no allocation between (ignored)
    size_mismatches: int = 0  # a free whose size differs from its allocation's
    total_mismatches: int = 0  # Total Allocated that does not follow from the previous event and Bytes
    outside_steps: int = 0  # events in no step window
    after_last_step: int = 0  # of those, after the last step of their profiler cycle (a trace cut mid-step?)
    excess_bytes: int = 0  # live blocks beyond the allocator's total at the peak (taken off, said)


@dataclass(frozen=True)
class DeviceMemory:
    """The memory of one device of one rank over the captured steps."""

    rank: int
    device: int  # -1: the host (a CPU-only capture's allocator)
    steps: tuple[MemoryStep, ...]
    largest: tuple[LiveBlock, ...] = ()  # the largest blocks alive at the peak step's peak
    check: MemoryCheck = field(default_factory=MemoryCheck)
    trace_max_allocated: int = 0  # the largest Total Allocated of any of the device's memory events
    allocator_peak: Optional[int] = None  # max_memory_allocated of the peak's step, from the capture
    device_total: Optional[int] = None  # the device's memory (the capture's environment)
    model: Mapping[str, int] = field(
        default_factory=dict
    )  # the capture's parameters/gradients/optimizer bytes
    addresses: bool = True  # the trace gave block addresses (lifetimes known)
    host_allocator: bool = False  # the CPU allocator: it counts only what was allocated while profiling

    @property
    def peak(self) -> Optional[MemoryStep]:
        """The step whose peak is highest (the first of equals)."""
        return max(self.steps, key=lambda s: s.peak_allocated, default=None)

    @property
    def peak_allocated(self) -> int:
        p = self.peak
        return p.peak_allocated if p is not None else 0
