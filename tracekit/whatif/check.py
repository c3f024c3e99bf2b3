"""`tracekit whatif A --python-from B` / `--python-speedup S`: the calibrated scenario, and the prediction
set beside what B measured (and beside the bytecode-only bound), as the result's notes."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Mapping, Optional

from tracekit.data import files
from tracekit.data.store import is_capture, read_meta
from tracekit.errors import TracekitError
from tracekit.parse.parser import find_manifest
from tracekit.whatif.predict import whatif
from tracekit.whatif.python import from_manifests, from_speedup
from tracekit.whatif.scenario import ScenarioError, WhatIfOptions


def read_manifests(spec: str) -> tuple[str, list[Mapping[str, Any]]]:
    """B's label and manifests: a capture (.parquet or folder), a run folder, or several joined with ','."""

    out = []
    for loc in files.split_joined(spec):
        try:
            manifest = (read_meta(loc) or {}).get("manifest") if is_capture(loc) else None
            if manifest is None and files.is_dir(loc):
                manifest = find_manifest([loc])  # type: ignore[list-item]  # a Location: local or a URI
        except TracekitError as exc:
            raise ScenarioError(f"--python-from {loc}: {exc}") from None
        if not isinstance(manifest, Mapping):
            raise ScenarioError(
                f"--python-from {loc}: no capture manifest there (a capture or run folder that `tracekit "
                "capture` wrote)"
            )
        out.append(manifest)
    if not out:
        raise ScenarioError("--python-from: name a capture, e.g. --python-from runs/heavy_mlp/py3.11.parquet")
    names = [str(m.get("run") or "B") for m in out]
    label = names[0] if len(names) == 1 else f"{names[0]} … ×{len(names)}"
    return label, out


def python_scenario(
    scenario: WhatIfOptions, manifest: Optional[Mapping[str, Any]]
) -> tuple[WhatIfOptions, Optional[dict]]:
    """The scenario with its calibrated interpreter factor (from its `python_from` or `python_speedup`),
    and B's label/manifests (None without B)."""
    if scenario.python_from is not None:
        label, manifests = read_manifests(scenario.python_from)
        model = from_manifests(manifest, manifests, label)
        return replace(scenario, python=model.to_json()), {"label": label, "manifests": manifests}
    if scenario.python_speedup is not None:
        return replace(scenario, python=from_speedup(manifest, scenario.python_speedup).to_json()), None
    return scenario, None


def measured_ms(manifests: list[Mapping[str, Any]]) -> Optional[float]:
    """The median of the runs' unprofiled step times (each run's median first), ms."""
    per_run = [statistics.median(m["unprofiled_step_ms"]) for m in manifests if m.get("unprofiled_step_ms")]
    return statistics.median(per_run) if per_run else None


def _miss(predicted: Optional[float], measured: Optional[float]) -> str:
    if predicted is None or measured is None or measured <= 0:
        return "—"
    return f"{(predicted / measured - 1) * 100:+.1f}%".replace("-", "−")


def with_python_check(
    result: Any,
    capture: Any,
    rp: Any,
    scenario: WhatIfOptions,
    other: Optional[dict],
    unprofiled_ms: Optional[float],
) -> Any:
    """`result` with notes: the bytecode-only bound, and B's measured step time with the misses."""

    bound = dict(scenario.python or {})
    bound["interpreter_factor"] = bound.get("bound_factor", 1.0)
    bound["text"] = f"all interpreter time as bytecode (×{bound['interpreter_factor']:.3f})"
    bres, _ = whatif(
        capture,
        replace(scenario, python=bound),
        unprofiled_step_ms=unprofiled_ms,
        replayer=rp,
        attribute=False,
    )
    if result.unprofiled is None or bres.unprofiled is None:
        return result
    pred, bpred = result.unprofiled.predicted_step_ms, bres.unprofiled.predicted_step_ms
    notes = [
        f"the bound, if every interpreter ns were bytecode (×{bound['interpreter_factor']:.3f}): "
        f"{bpred:.3f} ms/step unprofiled"
    ]
    if other is not None:
        measured = measured_ms(other["manifests"])
        if measured is not None:
            n = len(other["manifests"])
            notes.append(
                f"measured under {other['label']}: {measured:.3f} ms/step unprofiled (median of {n} "
                f"run{'s' if n > 1 else ''}); predicted {pred:.3f} ms: miss {_miss(pred, measured)}; "
                f"the bound {bpred:.3f} ms: miss {_miss(bpred, measured)} (B ran on the machine as it "
                "was then: its drift is in the miss)"
            )
    return replace(result, notes=tuple(result.notes) + tuple(notes))
