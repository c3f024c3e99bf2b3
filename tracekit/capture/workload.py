"""What a workload module provides, and the context the capture process hands it.

A workload is a module in the top-level `workloads/` package (stdlib + torch, torch imported inside
functions, Python 3.9) with::

    NAME = "heavy_mlp"
    SUMMARY = "one line"
    KNOBS = (Knob("batch_size", 256, "samples per step", cpu=32), ...)
    def build(ctx: Context) -> Runner      # Runner: .step() runs one training step; .samples_per_step
                                           # and, optionally, .manifest_extra (a JSON-able dict)

The capture process adds `COMMON_KNOBS` (seed, timing, profiler options) to every workload.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Tuple

from tracekit.capture.knobs import COMMON_KNOBS, Knob, KnobError

WORKLOAD_NAMES: Tuple[str, ...] = ("heavy_mlp", "dataloader_train", "tiny_ops")


@dataclass
class Context:
    """Where and how a workload runs: device kind, resolved knobs, and its rank in a multi-process run."""

    device: str  # "cuda" or "cpu"
    knobs: Dict[str, Any]
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    session: Any = None  # the capture's Session (None when a workload is built outside a capture)

    def batches(self, iterable: Iterable[Any], source: Any = None) -> Iterator[Any]:
        """Iterate `iterable` with each fetch timed into the capture's steps (unchanged outside one);
        `source`: the DataLoader behind it, for the manifest."""
        if self.session is None:
            return iter(iterable)
        return self.session.loader(iterable, source)

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.local_rank}" if self.device == "cuda" else "cpu"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def load(name: str) -> Any:
    """The workload module called `name` (imports no torch)."""
    if name not in WORKLOAD_NAMES:
        raise KnobError(
            f"unknown workload {name!r}; choose one of {', '.join(WORKLOAD_NAMES)} "
            "or capture your own script with --script train.py"
        )
    return importlib.import_module(f"workloads.{name}")


def knobs_of(name: str) -> Tuple[Knob, ...]:
    """All knobs of a workload: its own, then the common ones."""
    return tuple(load(name).KNOBS) + COMMON_KNOBS


def describe() -> List[Dict[str, Any]]:
    """Every workload with its knobs and defaults (what `tracekit workloads --json` prints)."""
    out = []
    for name in WORKLOAD_NAMES:
        mod = load(name)
        out.append(
            {
                "name": name,
                "summary": mod.SUMMARY,
                "knobs": [k.describe() for k in mod.KNOBS],
                "common_knobs": [k.describe() for k in COMMON_KNOBS],
            }
        )
    return out
