"""Workload knobs (`--set key=value`) and the profiler schedule (`--schedule wait=1,...`).

Stdlib only: the analysis side validates knobs before it starts a target interpreter, and the capture side
resolves them inside it (Python 3.9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

_UNSET = object()
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class KnobError(ValueError):
    """A bad `--set` or `--schedule` value; the message names it and the valid options."""


@dataclass(frozen=True)
class Knob:
    """One setting of a workload: its default (CUDA), its CPU default when that differs, and a help line."""

    name: str
    default: Any
    help: str
    cpu: Any = _UNSET
    choices: Optional[Tuple[str, ...]] = None
    # The smallest value of a number knob: 0 unless given (a count of -5 ran and captured nothing).
    minimum: Optional[float] = 0

    @property
    def kind(self) -> type:
        return type(self.default)

    def default_for(self, device: str) -> Any:
        return self.default if device != "cpu" or self.cpu is _UNSET else self.cpu

    def convert(self, text: str) -> Any:
        """The value of `--set name=text`, typed like the default."""
        kind = self.kind
        low = text.strip().lower()
        if kind is bool:
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise KnobError(f"--set {self.name}={text}: expected true or false")
        try:
            value = kind(text)
        except ValueError:
            raise KnobError(f"--set {self.name}={text}: expected {kind.__name__}") from None
        if kind in (int, float):
            if not math.isfinite(value):
                raise KnobError(f"--set {self.name}={text}: expected a finite number")
            if self.minimum is not None and value < self.minimum:
                raise KnobError(f"--set {self.name}={text}: must be at least {self.minimum:g}")
        if self.choices is not None and value not in self.choices:
            raise KnobError(f"--set {self.name}={text}: choose one of {', '.join(self.choices)}")
        return value

    def describe(self) -> Dict[str, Any]:
        doc = {"name": self.name, "default": self.default, "type": self.kind.__name__, "help": self.help}
        doc["cpu_default"] = self.default if self.cpu is _UNSET else self.cpu
        if self.choices is not None:
            doc["choices"] = list(self.choices)
        if self.kind in (int, float) and self.minimum is not None:
            doc["minimum"] = self.minimum
        return doc


# Knobs every capture has (built-in workloads and --script alike): they shape the measurement, not the work.
COMMON_KNOBS: Tuple[Knob, ...] = (
    Knob("seed", 0, "random seed (rank r uses seed + r)"),
    Knob("timing_warmup", 2, "unprofiled steps run first and not timed (lazy init, allocator warm-up)"),
    Knob(
        "timing_steps", 5, "unprofiled steps timed just before the profiled run (profiler overhead baseline)"
    ),
    Knob(
        "with_stack", False, "record Python stacks (python_function events: sync call sites, bigger traces)"
    ),
    Knob("record_shapes", False, "record operator input shapes"),
    Knob("profile_memory", False, "record allocator events"),
)


def parse_assignments(items: Iterable[str], flag: str = "--set") -> Dict[str, str]:
    """`["a=1", "b=x"]` → `{"a": "1", "b": "x"}` (values still text)."""
    out: Dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise KnobError(f"{flag} {item!r}: expected key=value, e.g. {flag} num_workers=0")
        out[key] = value.strip()
    return out


def resolve_knobs(knobs: Sequence[Knob], given: Dict[str, Any], device: str, owner: str) -> Dict[str, Any]:
    """Every knob's value on `device`: the given ones converted and checked, the rest their defaults."""
    by_name = {k.name: k for k in knobs}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise KnobError(
            f"{owner} has no knob {', '.join(unknown)}; its knobs are {', '.join(sorted(by_name))} "
            "(`tracekit workloads` lists them with defaults)"
        )
    values = {}
    for knob in knobs:
        if knob.name in given:
            raw = given[knob.name]
            values[knob.name] = knob.convert(raw) if isinstance(raw, str) else knob.convert(str(raw))
        else:
            values[knob.name] = knob.default_for(device)
    return values


SCHEDULE_KEYS = ("wait", "warmup", "active", "repeat", "skip_first")
DEFAULT_SCHEDULE: Dict[str, int] = {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 0}


def parse_schedule(text: Optional[str]) -> Dict[str, int]:
    """`"wait=1,warmup=1,active=3,repeat=2"` → a full schedule dict (missing keys keep their defaults)."""
    sched = dict(DEFAULT_SCHEDULE)
    if not text:
        return sched
    for key, value in parse_assignments([p for p in text.split(",") if p.strip()], "--schedule").items():
        if key not in SCHEDULE_KEYS:
            raise KnobError(f"--schedule {key}={value}: unknown key; use {', '.join(SCHEDULE_KEYS)}")
        try:
            sched[key] = int(value)
        except ValueError:
            raise KnobError(f"--schedule {key}={value}: expected a whole number") from None
        if sched[key] < 0:
            raise KnobError(f"--schedule {key}={value}: must not be negative")
    if sched["active"] < 1:
        raise KnobError("--schedule active must be at least 1")
    if sched["repeat"] < 1:
        raise KnobError("--schedule repeat must be at least 1 (a capture runs a fixed number of steps)")
    return sched


def format_schedule(sched: Dict[str, int]) -> str:
    return ",".join(f"{k}={sched[k]}" for k in SCHEDULE_KEYS)


def schedule_steps(sched: Dict[str, int]) -> int:
    """How many steps a schedule runs in all."""
    return sched["skip_first"] + (sched["wait"] + sched["warmup"] + sched["active"]) * sched["repeat"]


def schedule_phase(sched: Dict[str, int], index: int) -> str:
    """What the profiler does at step `index` (0-based): skip, wait, warmup or active."""
    if index < sched["skip_first"]:
        return "skip"
    pos = (index - sched["skip_first"]) % (sched["wait"] + sched["warmup"] + sched["active"])
    if pos < sched["wait"]:
        return "wait"
    if pos < sched["wait"] + sched["warmup"]:
        return "warmup"
    return "active"


def knob_names(knobs: Iterable[Knob]) -> List[str]:
    return [k.name for k in knobs]
