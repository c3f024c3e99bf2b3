"""Can two captures be compared, and what differs between them? Read from the capture manifests.

A diff is only meaningful when the captures ran the same work the same way. Differences in the workload,
its knobs, the profiler schedule, torch, CUDA, the device or the number of ranks make a diff "not
comparable": the report still shows the numbers but says plainly what differs. The Python interpreter is
the one thing a cross-version comparison *means* to vary: its differences are listed as what is compared,
never as a warning. Facts of the host (name, OS) are listed as notes.

Captures without a manifest (a trace parsed from disk) are checked on what the traces tell: device or
CPU-only, device names, ranks, and the framework ops called per step — the same code calls the same
aten ops the same number of times per step, so a low overlap (`MIN_OP_CALL_OVERLAP`) says the traces ran
different workloads.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Mapping, Optional, Sequence

from tracekit.errors import TracekitError

MIN_OP_CALL_OVERLAP = 0.8  # Σ min / Σ max of median calls per step per op; below: different code ran


class Role(str, Enum):
    """What a difference means for the comparison."""

    BLOCKING = "blocking"  # makes the captures not comparable
    COMPARED = "compared"  # what the comparison is about (the Python interpreter)
    NOTE = "note"  # worth knowing, does not change the work (host name, OS)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Difference:
    """One manifest field whose value differs between A and B."""

    field: str  # dotted manifest path, e.g. "torch.version" or "knobs.num_workers"
    label: str  # what a reader calls it
    a: Any
    b: Any
    role: Role
    text: Optional[str] = None  # a sentence, where "a vs b" does not say it

    def describe(self) -> str:
        return self.text or f"{self.label}: {_show(self.a)} vs {_show(self.b)}"


@dataclass(frozen=True)
class Comparability:
    """The verdict: comparable or not, every difference found, and what could not be checked."""

    comparable: bool
    differences: tuple[Difference, ...] = ()
    unchecked: tuple[str, ...] = ()  # e.g. "no manifest in A: workload and knobs not checked"

    @property
    def blocking(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.role is Role.BLOCKING)

    @property
    def compared(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.role is Role.COMPARED)

    @property
    def notes(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.role is Role.NOTE)

    def summary(self) -> str:
        """One line: 'comparable', or 'NOT comparable: workload: mlp vs sync; ...'."""
        if self.comparable:
            varied = "; ".join(d.describe() for d in self.compared)
            return f"comparable ({varied})" if varied else "comparable"
        return "NOT comparable: " + "; ".join(d.describe() for d in self.blocking)


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# (dotted path, label, role). The first path found in either manifest is used; knob and schedule
# dictionaries are compared key by key.
MANIFEST_FIELDS: tuple[tuple[str, str, Role], ...] = (
    ("workload", "workload", Role.BLOCKING),
    ("script", "script", Role.BLOCKING),
    ("device.type", "device type", Role.BLOCKING),
    ("device.name", "device", Role.BLOCKING),
    ("device.count", "device count", Role.BLOCKING),
    ("world_size", "ranks", Role.BLOCKING),
    ("torch.version", "torch", Role.BLOCKING),
    ("torch.cuda", "CUDA", Role.BLOCKING),
    ("torch.hip", "ROCm", Role.BLOCKING),
    ("torch.cudnn", "cuDNN", Role.BLOCKING),
    ("torch.num_threads", "torch threads", Role.BLOCKING),
    ("host.cpu_count", "CPU count", Role.BLOCKING),
    ("python.version", "Python", Role.COMPARED),
    ("python.implementation", "Python implementation", Role.COMPARED),
    ("python.gil_disabled", "free-threaded Python", Role.COMPARED),
    ("host.name", "host", Role.NOTE),
    ("host.os", "OS", Role.NOTE),
)
# Dictionaries compared key by key: every knob and every schedule entry must match.
MANIFEST_DICTS: tuple[tuple[str, str], ...] = (
    ("knobs", "knob"),
    ("schedule", "schedule"),
)


def _get(doc: Optional[Mapping[str, Any]], path: str) -> Any:
    cur: Any = doc
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


# How the interpreter was built (tracekit/capture/environment.py `python_build`): compared where both
# manifests record it; a difference is a note beside the Python version, since the speed of a build is not
# the speed of a version (pyenv builds without PGO/LTO against a distribution's PGO+LTO build).
BUILD_FIELDS: tuple[tuple[str, str], ...] = (
    ("pgo", "PGO"),
    ("lto", "LTO"),
    ("shared_libpython", "shared libpython"),
    ("distribution", "a distribution's build"),
    ("compiler", "compiler"),
    ("debug", "debug build"),
)


def _yes_no(value: Any) -> str:
    if isinstance(value, str):
        return value
    return {True: "yes", False: "no", None: "cannot tell"}.get(value, str(value))


def build_difference(a: Optional[Mapping[str, Any]], b: Optional[Mapping[str, Any]]) -> Optional[Difference]:
    """One note naming every build fact that differs, or None (same build, or not recorded in both)."""
    ba, bb = _get(a, "python.build"), _get(b, "python.build")
    if not isinstance(ba, Mapping) or not isinstance(bb, Mapping):
        return None
    parts = [
        f"{label} {_yes_no(ba.get(key))} vs {_yes_no(bb.get(key))}"
        for key, label in BUILD_FIELDS
        if ba.get(key) != bb.get(key)
    ]
    if not parts:
        return None
    text = (
        f"the interpreters were built differently ({'; '.join(parts)}): part of a difference in speed may "
        "be the build's, not the Python version's"
    )
    return Difference("python.build", "Python build", None, None, Role.NOTE, text=text)


def compare_manifests(a: Optional[Mapping[str, Any]], b: Optional[Mapping[str, Any]]) -> list[Difference]:
    """Every field of MANIFEST_FIELDS / MANIFEST_DICTS that differs between two manifests, and the
    interpreters' build (`build_difference`)."""
    out: list[Difference] = []
    build = build_difference(a, b)
    if build is not None:
        out.append(build)
    for path, label, role in MANIFEST_FIELDS:
        va, vb = _get(a, path), _get(b, path)
        if va != vb:
            out.append(Difference(path, label, va, vb, role))
    for path, label in MANIFEST_DICTS:
        da, db = _get(a, path), _get(b, path)
        if da is None and db is None:
            continue
        if not isinstance(da, Mapping) or not isinstance(db, Mapping):
            out.append(Difference(path, label + "s", da, db, Role.BLOCKING))
            continue
        for key in sorted(set(da) | set(db)):
            if da.get(key) != db.get(key):
                role = Role.NOTE if _added_at_default(a, b, path, key) else Role.BLOCKING
                out.append(Difference(f"{path}.{key}", f"{label} {key}", da.get(key), db.get(key), role))
    return out


def _added_at_default(
    a: Optional[Mapping[str, Any]], b: Optional[Mapping[str, Any]], path: str, key: str
) -> bool:
    """A knob that one capture lacks (made before the knob existed) while the other left it at its
    default (not in its `knobs_set`): both ran the workload as it was before the knob. Only a note."""
    if path != "knobs":
        return False
    for mine, other in ((a, b), (b, a)):
        if key not in (_get(mine, "knobs") or {}) and key in (_get(other, "knobs") or {}):
            return key not in (_get(other, "knobs_set") or {})
    return False


@dataclass(frozen=True)
class Facts:
    """What a capture's traces tell about it when there is no manifest (filled from its Report)."""

    cpu_only: bool
    device_names: tuple[str, ...]
    ranks: int
    op_calls_per_step: Mapping[str, float]  # median calls per step of each framework op


def op_call_overlap(a: Mapping[str, float], b: Mapping[str, float]) -> Optional[float]:
    """Σ min / Σ max over ops of calls per step: 1.0 for the same code, near 0 for unrelated code."""
    keys = set(a) | set(b)
    top = sum(min(a.get(k, 0.0), b.get(k, 0.0)) for k in keys)
    bottom = sum(max(a.get(k, 0.0), b.get(k, 0.0)) for k in keys)
    return top / bottom if bottom > 0 else None


def compare_facts(a: Facts, b: Facts) -> list[Difference]:
    out: list[Difference] = []
    if a.cpu_only != b.cpu_only:
        show = {True: "CPU only", False: "GPU"}
        out.append(
            Difference("cpu_only", "device activity", show[a.cpu_only], show[b.cpu_only], Role.BLOCKING)
        )
    if a.device_names != b.device_names and a.device_names and b.device_names:
        out.append(
            Difference(
                "devices", "devices", ", ".join(a.device_names), ", ".join(b.device_names), Role.BLOCKING
            )
        )
    if a.ranks != b.ranks:
        out.append(Difference("ranks", "ranks", a.ranks, b.ranks, Role.BLOCKING))
    return out


def check(
    manifest_a: Optional[Mapping[str, Any]],
    manifest_b: Optional[Mapping[str, Any]],
    facts_a: Facts,
    facts_b: Facts,
    compared: Sequence[str] = (),
) -> Comparability:
    """Compare two captures: their manifests when both have one, and always what their traces tell.

    `compared` names what the comparison means to vary (`tracekit diff --compare amp`): a knob name or a
    dotted manifest field (`torch.version`); its differences count as compared, not as blocking."""
    differences: list[Difference] = []
    unchecked: list[str] = []
    has_a = bool(manifest_a) and _get(manifest_a, "workload") is not None
    has_b = bool(manifest_b) and _get(manifest_b, "workload") is not None
    check_compared(compared, [m for m in (manifest_a, manifest_b) if m])
    if has_a and has_b:
        differences += compare_manifests(manifest_a, manifest_b)
    else:
        missing = " and ".join(side for side, has in (("A", has_a), ("B", has_b)) if not has)
        unchecked.append(
            f"no capture manifest in {missing}: workload, knobs, schedule and versions not checked; "
            "judged from the traces"
        )
    seen = {d.field for d in differences}
    for d in compare_facts(facts_a, facts_b):
        if not (d.field == "devices" and "device.name" in seen):
            differences.append(d)
    overlap = op_call_overlap(facts_a.op_calls_per_step, facts_b.op_calls_per_step)
    if overlap is not None and overlap < MIN_OP_CALL_OVERLAP:
        # Without manifests this is the evidence of different workloads; with them, a note (a torch
        # upgrade can change which aten ops run).
        role = Role.NOTE if (has_a and has_b) else Role.BLOCKING
        differences.append(
            Difference(
                "op_calls",
                "framework op calls per step",
                None,
                round(overlap, 3),
                role,
                text=f"framework op calls per step overlap {overlap:.0%} (the same code: about 100%)",
            )
        )
    differences = [
        replace(d, role=Role.COMPARED) if d.role is Role.BLOCKING and is_compared(d.field, compared) else d
        for d in differences
    ]
    comparable = not any(d.role is Role.BLOCKING for d in differences)
    return Comparability(comparable, tuple(differences), tuple(unchecked))


# What the traces themselves tell, whatever the manifests (compare_facts, op_call_overlap).
FACT_FIELDS = ("cpu_only", "devices", "ranks", "op_calls")


def check_compared(compared: Sequence[str], manifests: Sequence[Mapping[str, Any]]) -> None:
    """`--compare NAME` must name a knob or a manifest field of one of the captures (or a fact of the
    traces): a misspelt name would otherwise be accepted and change nothing."""
    for name in compared:
        known = name in FACT_FIELDS or any(
            _get(m, name) is not None or _get(m, f"knobs.{name}") is not None for m in manifests
        )
        if not known:
            knobs = sorted({k for m in manifests for k in (_get(m, "knobs") or {})})
            raise TracekitError(
                f"--compare {name}: no knob or manifest field of that name in these captures "
                f"(knobs: {', '.join(knobs) or 'none'}; fields such as torch.version, python.version, "
                f"or {', '.join(FACT_FIELDS)})"
            )


def is_compared(field: str, compared: Sequence[str]) -> bool:
    """Whether a manifest field is one the user said the comparison varies ('amp' means knobs.amp)."""
    return any(field in (name, f"knobs.{name}") or field.startswith(name + ".") for name in compared)


def median_calls(steps_calls: Sequence[int]) -> float:
    return float(statistics.median(steps_calls)) if steps_calls else 0.0
