"""What another Python would do to a capture's host time, from the calibrations in the manifests.

A bytecode speed-up is not a host-time speed-up. Between torch ops the host runs Python bytecode *and* C++:
argument parsing in torch's bindings, the dispatcher, the allocator, autograd's bookkeeping. On an H200
host, CPython 3.11's pure-Python loop ran 1.45× faster than 3.10's, while the steps of tiny_ops stayed
within noise: dividing the interpreter cause by 1.45 predicted −11 % to −29 %.

So the calibration `tracekit capture` runs in every run (tracekit/capture/calibrate.py) measures the cost
of what actually differs: a torch op called from Python (`torch_call`: the whole host path) beside a bare
bytecode loop (`python_loop`) and the bytecode side of calling any C function (`builtin_call`), with a
machine-speed control (`aten_cpu`: C++ work no Python version changes). Each figure is the fastest trial
(`min_ns`, the interpreter's speed rather than the neighbours') divided by the aten control of the same
calibration (the host's speed switches, and every CPU figure with it), the mean of the run's before and
after calibrations, the median over runs.

- `from_manifests(A, B)` (`tracekit whatif A --python-from B`): the interpreter cause of A scales by
  ``torch_call_B / torch_call_A``, each in units of its own calibration's aten control (the machine's speed
  cancels). Bound: ``python_loop_B / python_loop_A``, likewise — as if every interpreter ns were bytecode.
- `from_speedup(A, S)` (`--python-speedup S`, a pyperformance-style bytecode speed-up): the same host path
  with only its bytecode part ``p = builtin_call_A / torch_call_A`` made S× faster:
  ``1 − p·(1 − 1/S)``. Bound: ``1/S``. Without a calibration in A's manifest only the bound is known, and
  it is used (and said).

Framework and launch time stay: they are C++ and CUDA's runtime, which no Python version changes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tracekit.compare.control import calibration_values
from tracekit.whatif.scenario import ScenarioError

FIGURES = ("python_loop", "builtin_call", "torch_call", "aten_cpu")


@dataclass(frozen=True)
class PythonModel:
    """The interpreter cause's factor under another Python, the bytecode-only bound, and how it was got."""

    interpreter_factor: float
    bound_factor: float
    text: str
    calibrated: bool
    figures: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "interpreter_factor": self.interpreter_factor,
            "bound_factor": self.bound_factor,
            "text": self.text,
            "calibrated": self.calibrated,
            "figures": dict(self.figures),
        }


def calibration(manifests: Sequence[Optional[Mapping[str, Any]]]) -> Optional[dict[str, float]]:
    """Per figure of FIGURES, the fastest trial divided by the aten control's fastest trial of the same
    calibration (`tracekit.compare.control.calibration_values`), the mean of a run's before and after, the
    median over the runs of all `manifests`; `aten_cpu` itself in ns. None when a figure is missing."""
    out: dict[str, float] = {}
    for name in FIGURES:
        per = None if name == "aten_cpu" else "aten_cpu"
        vals: list[float] = []
        for m in manifests:
            v = calibration_values(m, name, stat="min_ns", per=per)
            if v is None:
                continue
            pooled = isinstance((m or {}).get("group_calibration"), (list, tuple))
            vals += [float(x) for x in v] if pooled else [float(np.mean(v))]  # a run: its before and after
        if not vals:
            return None
        out[name] = statistics.median(vals)
    return out


def from_manifests(
    a: Optional[Mapping[str, Any]], b: Sequence[Optional[Mapping[str, Any]]], b_label: str
) -> PythonModel:
    """A's interpreter time under B's interpreter (see the module docstring)."""
    ca, cb = calibration([a]), calibration(b)
    if ca is None or cb is None:
        which = "the capture's" if ca is None else f"{b_label}'s"
        raise ScenarioError(
            f"--python-from {b_label}: {which} manifest has no calibration (captures made with `tracekit "
            "capture` since calibrations were added have one); use --python-speedup S instead"
        )
    m = cb["aten_cpu"] / ca["aten_cpu"]
    call = cb["torch_call"] / ca["torch_call"]  # each already divided by its own calibration's control
    loop = cb["python_loop"] / ca["python_loop"]
    text = (
        f"python as in {b_label}: a torch op called from Python takes ×{call:.3f} (bytecode loop "
        f"×{loop:.3f}; machine-speed control ×{m:.3f} divided out) → interpreter ×{call:.3f}"
    )
    figures = {"a": ca, "b": cb, "machine_ratio": m}
    return PythonModel(call, loop, text, True, figures)


def from_speedup(a: Optional[Mapping[str, Any]], speedup: float) -> PythonModel:
    """A's interpreter time if its bytecode ran `speedup` times faster (see the module docstring)."""
    ca = calibration([a])
    bound = 1.0 / speedup
    if ca is None:
        text = (
            f"python {speedup:g}x faster (interpreter time / {speedup:g}: no calibration in the manifest, so "
            "all interpreter time is taken as bytecode, an upper bound on the change)"
        )
        return PythonModel(bound, bound, text, False)
    p = min(1.0, ca["builtin_call"] / ca["torch_call"])
    factor = 1.0 - p * (1.0 - bound)
    text = (
        f"python bytecode {speedup:g}x faster: the host path of a torch op called from Python is "
        f"{p:.0%} bytecode here (calibration) → interpreter ×{factor:.3f} (all bytecode: ×{bound:.3f})"
    )
    return PythonModel(factor, bound, text, True, {"a": ca, "bytecode_share": p})
