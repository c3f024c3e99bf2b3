"""What a what-if changes: host time per cause, device activities by name, framework ops by name, one
rank's host, the wait of blocking calls, kernels launched as CUDA graphs, the DataLoader's worker count.
Parsed from the command line's `--set CAUSE=FACTOR`, `--kernels REGEX=FACTOR`, `--ops REGEX=FACTOR`,
`--rank-host RANK=FACTOR`, `--python-speedup S`, `--cuda-graphs` / `--cuda-graphs-region REGEX` and
`--loader-workers N`; every mistake is a `ScenarioError` (one line, exit 2).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from tracekit.analysis.causes import SCALED_CAUSES
from tracekit.errors import TracekitError

# The largest factor a scenario takes (and --python-speedup's range, 1/MAX_FACTOR to MAX_FACTOR). The
# replay adds int64 ns: a factor of 1e12 on a 10 s trace's launches overflowed into a negative step
# ("launch -489778201503.753 ms/step"). A million times slower is past any question a what-if answers.
MAX_FACTOR = 1e6


class ScenarioError(TracekitError):
    """A --set / --kernels / --rank-host / --python-speedup value that cannot be used."""


@dataclass(frozen=True)
class Scenario:
    """Factors: 1 changes nothing, 0 removes. `kernels` maps a regular expression (searched in the
    device activity's name) to a factor; `ops` one searched in framework ops' names (their host time,
    their syncs' waits and the device work they launch); several matching patterns multiply."""

    set: Mapping[str, float] = field(default_factory=dict)
    kernels: Mapping[str, float] = field(default_factory=dict)
    rank_host: Mapping[int, float] = field(default_factory=dict)
    python_speedup: Optional[float] = None
    ops: Mapping[str, float] = field(default_factory=dict)
    # `--cuda-graphs`: the device work of each region launched as one CUDA graph (whatif/cudagraph.py);
    # the regions are the steps, or with `graph_region` the outermost host events whose name matches it
    cuda_graphs: bool = False
    graph_region: Optional[str] = None
    # the DataLoader's worker count instead of the capture's (the unprofiled producer model only,
    # tracekit.whatif.loader); None keeps it
    loader_workers: Optional[int] = None
    # The interpreter cause's factor from the calibrations (tracekit.whatif.python.PythonModel.to_json):
    # `--python-from B`, or `--python-speedup S` translated into host time. It replaces the plain 1/S.
    python: Optional[Mapping[str, Any]] = None
    # `--pin-memory`: the copies from pageable host memory made from pinned memory without blocking: their
    # runtime calls return at once (tracekit.whatif.replay.pinned_factors)
    pin_memory: bool = False

    @property
    def no_wait(self) -> bool:
        return self.set.get("sync", 1.0) == 0.0

    def cause_factor(self, cause: str) -> float:
        f = float(self.set.get(cause, 1.0))
        if cause == "interpreter" and self.python is not None:
            f *= float(self.python["interpreter_factor"])
        elif cause == "interpreter" and self.python_speedup:
            f /= self.python_speedup
        return f

    @property
    def is_identity(self) -> bool:
        return (
            all(v == 1.0 for v in self.set.values())
            and all(v == 1.0 for v in self.kernels.values())
            and all(v == 1.0 for v in self.ops.values())
            and all(v == 1.0 for v in self.rank_host.values())
            and self.python_speedup in (None, 1.0)
            and not self.cuda_graphs
            and self.loader_workers is None
            and not self.pin_memory
            and (self.python is None or float(self.python["interpreter_factor"]) == 1.0)
        )

    def to_json(self) -> dict:
        doc = {
            "set": dict(self.set),
            "kernels": dict(self.kernels),
            "rank_host": {str(k): v for k, v in self.rank_host.items()},
            "python_speedup": self.python_speedup,
            "ops": dict(self.ops),
            "cuda_graphs": self.cuda_graphs,
            "graph_region": self.graph_region,
            "loader_workers": self.loader_workers,
            "pin_memory": self.pin_memory,
        }
        if self.python is not None:
            doc["python"] = dict(self.python)
        return doc

    def describe(self) -> str:
        parts = [f"{k}={v:g}" for k, v in self.set.items()]
        parts += [f"kernels '{k}'={v:g}" for k, v in self.kernels.items()]
        parts += [f"ops '{k}'={v:g}" for k, v in self.ops.items()]
        parts += [f"rank {k} host={v:g}" for k, v in self.rank_host.items()]
        if self.loader_workers is not None:
            parts.append(f"{self.loader_workers} DataLoader workers")
        if self.pin_memory:
            parts.append("pageable copies from pinned memory, not blocking the host")
        if self.python is not None:
            parts.append(str(self.python["text"]))
        elif self.python_speedup:
            parts.append(
                f"python {self.python_speedup:g}x faster (interpreter time / {self.python_speedup:g})"
            )
        if self.cuda_graphs:
            where = "each step"
            if self.graph_region:
                where = f"each outermost host event matching '{self.graph_region}'"
            parts.append(f"CUDA graphs: the device work of {where} launched as one graph")
        return ", ".join(parts) if parts else "nothing changed"


def _factor(text: str, what: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise ScenarioError(
            f"{what}: {text!r} is not a number; write e.g. {what.split('=')[0]}=0.5"
        ) from None
    if not math.isfinite(f) or f < 0 or f > MAX_FACTOR:
        raise ScenarioError(
            f"{what}: the factor must be a number ≥ 0 and ≤ {MAX_FACTOR:g} (0 removes, 1 keeps)"
        )
    return f


def _split(spec: str, flag: str) -> tuple[str, str]:
    key, sep, value = spec.rpartition("=")
    if not sep or not key:
        raise ScenarioError(f"{flag} {spec!r}: write NAME=FACTOR, e.g. {flag} interpreter=0.5")
    return key, value


def parse_scenario(
    sets: Iterable[str] = (),
    kernels: Iterable[str] = (),
    rank_host: Iterable[str] = (),
    python_speedup: Optional[float] = None,
    ops: Iterable[str] = (),
    cuda_graphs: bool = False,
    graph_region: Optional[str] = None,
    loader_workers: Optional[int] = None,
    pin_memory: bool = False,
) -> Scenario:
    """The scenario of the command-line flags (values as typed); `graph_region` implies `cuda_graphs`."""
    s: dict[str, float] = {}
    for spec in sets:
        key, value = _split(spec, "--set")
        if key not in SCALED_CAUSES:
            raise ScenarioError(
                f"--set {spec}: unknown cause {key!r}; choose one of {', '.join(SCALED_CAUSES)}"
            )
        f = _factor(value, f"--set {spec}")
        if key == "sync" and f not in (0.0, 1.0):
            raise ScenarioError(f"--set {spec}: sync takes 0 (the host no longer waits; the work stays) or 1")
        s[key] = f
    k = _patterns(kernels, "--kernels")
    o = _patterns(ops, "--ops")
    rh: dict[int, float] = {}
    for spec in rank_host:
        key, value = _split(spec, "--rank-host")
        try:
            rank = int(key)
        except ValueError:
            raise ScenarioError(f"--rank-host {spec}: {key!r} is not a rank number") from None
        rh[rank] = _factor(value, f"--rank-host {spec}")
    if python_speedup is not None and not 1 / MAX_FACTOR <= python_speedup <= MAX_FACTOR:
        raise ScenarioError(
            f"--python-speedup {python_speedup:g}: give how many times faster the interpreter runs, "
            f"from {1 / MAX_FACTOR:g} to {MAX_FACTOR:g}"
        )
    if loader_workers is not None and loader_workers < 0:
        raise ScenarioError(f"--loader-workers {loader_workers}: give a worker count ≥ 0 (0 = no workers)")
    if graph_region is not None:
        try:
            re.compile(graph_region)
        except re.error as exc:
            raise ScenarioError(
                f"--cuda-graphs-region {graph_region!r} is not a regular expression ({exc})"
            ) from None
    graphs = bool(cuda_graphs or graph_region is not None)
    return Scenario(
        set=s,
        kernels=k,
        rank_host=rh,
        python_speedup=python_speedup,
        ops=o,
        cuda_graphs=graphs,
        graph_region=graph_region,
        loader_workers=loader_workers,
        pin_memory=bool(pin_memory),
    )


def _patterns(specs: Iterable[str], flag: str) -> dict[str, float]:
    """REGEX=FACTOR flags as {regex: factor}."""
    out: dict[str, float] = {}
    for spec in specs:
        key, value = _split(spec, flag)
        try:
            re.compile(key)
        except re.error as exc:
            raise ScenarioError(f"{flag} {spec}: {key!r} is not a regular expression ({exc})") from None
        out[key] = _factor(value, f"{flag} {spec}")
    return out


__all__ = ["Scenario", "ScenarioError", "parse_scenario", "SCALED_CAUSES", "MAX_FACTOR"]
