"""What a what-if changes, and every flag of `tracekit whatif`: `WhatIfOptions` declares each once (its
flag, help, parsing, validation, JSON and description: tracekit.flags), and the CLI, the API
(`tk.whatif(path, set=["sync=0"])`) and the replay read its fields. Host time per cause (`--set
CAUSE=FACTOR`), device activities and framework ops by name (`--kernels`, `--ops REGEX=FACTOR`), one
rank's host (`--rank-host RANK=FACTOR`), the wait of blocking calls (`--set sync=0`), the interpreter
(`--python-speedup S`, `--python-from B`), kernels launched as CUDA graphs (`--cuda-graphs`,
`--cuda-graphs-region REGEX`), the DataLoader's worker count (`--loader-workers N`), pageable copies
made from pinned memory (`--pin-memory`), channels_last and autocast as whole knobs (`--channels-last`,
`--autocast bf16`: tracekit.whatif.knobs); every mistake is a `ScenarioError` (one line, exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from tracekit import flags
from tracekit.analysis.options import STEP
from tracekit.errors import TracekitError
from tracekit.flags import Flag, checked_regex, option

# The largest factor a scenario takes (and --python-speedup's range, 1/MAX_FACTOR to MAX_FACTOR). The
# replay adds int64 ns: a factor of 1e12 on a 10 s trace's launches overflowed into a negative step
# ("launch -489778201503.753 ms/step"). A million times slower is past any question a what-if answers.
MAX_FACTOR = 1e6


class ScenarioError(TracekitError):
    """A --set / --kernels / --rank-host / --python-speedup value that cannot be used."""


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


def _specs(value: Any, flag: str) -> Iterable[tuple[str, str, str]]:
    """(spec, key, value text) of each NAME=FACTOR given: the command line's strings, or a mapping a
    Python caller built (then each spec is written back as NAME=FACTOR for the messages)."""
    if isinstance(value, Mapping):
        return [
            (f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}", str(k), str(v))
            for k, v in value.items()
        ]
    items = [value] if isinstance(value, str) else list(value)
    return [(spec, *_split(spec, flag)) for spec in items]


def _causes(value: Any) -> dict[str, float]:
    """--set CAUSE=FACTOR, or sync=0."""
    # The cause table loads numpy and pyarrow, which `tracekit --help` (every command's options) does
    # not otherwise import (benchmarks/RESULTS.md, "Issue 36 merged").
    from tracekit.analysis.causes import SCALED_CAUSES

    out: dict[str, float] = {}
    for spec, key, text in _specs(value, "--set"):
        if key not in SCALED_CAUSES:
            raise ScenarioError(
                f"--set {spec}: unknown cause {key!r}; choose one of {', '.join(SCALED_CAUSES)}"
            )
        f = _factor(text, f"--set {spec}")
        if key == "sync" and f not in (0.0, 1.0):
            raise ScenarioError(f"--set {spec}: sync takes 0 (the host no longer waits; the work stays) or 1")
        out[key] = f
    return out


def _patterns_of(flag: str):
    """REGEX=FACTOR flags as {regex: factor}."""

    def parse(value: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        for spec, key, text in _specs(value, flag):
            checked_regex(key, f"{flag} {spec}: {key!r}", ScenarioError)
            out[key] = _factor(text, f"{flag} {spec}")
        return out

    return parse


def _ranks(value: Any) -> dict[int, float]:
    """--rank-host RANK=FACTOR."""
    out: dict[int, float] = {}
    for spec, key, text in _specs(value, "--rank-host"):
        try:
            rank = int(key)
        except ValueError:
            raise ScenarioError(f"--rank-host {spec}: {key!r} is not a rank number") from None
        out[rank] = _factor(text, f"--rank-host {spec}")
    return out


def _speedup(value: Optional[float]) -> Optional[float]:
    if value is not None and not 1 / MAX_FACTOR <= value <= MAX_FACTOR:
        raise ScenarioError(
            f"--python-speedup {value:g}: give how many times faster the interpreter runs, "
            f"from {1 / MAX_FACTOR:g} to {MAX_FACTOR:g}"
        )
    return value


def _comm(value: Optional[float]) -> float:
    if value is None:
        return 1.0
    return _factor(str(value), f"--comm {value}")


def _workers(value: Optional[int]) -> Optional[int]:
    if value is not None and value < 0:
        raise ScenarioError(f"--loader-workers {value}: give a worker count ≥ 0 (0 = no workers)")
    return value


def _region(value: Optional[str]) -> Optional[str]:
    return value if value is None else checked_regex(value, f"--cuda-graphs-region {value!r}", ScenarioError)


def _autocast(value: Optional[str]) -> Optional[str]:
    from tracekit.whatif.knobs import AUTOCAST_DTYPES

    if value is None:
        return None
    v = str(value).lower()
    if v not in AUTOCAST_DTYPES:
        raise ScenarioError(f"--autocast {value}: choose one of {', '.join(AUTOCAST_DTYPES)}")
    return v


def _step_ms(value: Optional[float]) -> Optional[float]:
    if value is not None and not value > 0:
        raise ScenarioError(f"--unprofiled-step-ms {value:g}: give the step time in ms, > 0")
    return value


def _ones(value: Mapping) -> bool:
    return all(v == 1.0 for v in value.values())


def _graphs_text(o: WhatIfOptions) -> Optional[str]:
    if not o.cuda_graphs:
        return None
    where = f"each outermost host event matching '{o.graph_region}'" if o.graph_region else "each step"
    return f"CUDA graphs: the device work of {where} launched as one graph"


@dataclass(frozen=True)
class WhatIfOptions:
    """The scenario of a what-if and how it is run: factors (1 changes nothing, 0 removes), each field a
    flag of `tracekit whatif` and a keyword of `tracekit.api.whatif`. `kernels` maps a regular
    expression (searched in the device activity's name) to a factor; `ops` one searched in framework
    ops' names (their host time, their syncs' waits and the device work they launch); several matching
    patterns multiply. Given as the command line writes them (["sync=0"]) or parsed ({"sync": 0.0})."""

    set: Mapping[str, float] = option(
        {},
        Flag(
            "--set",
            "CAUSE=FACTOR: scale the host time of a cause (interpreter, framework, launch, runtime, "
            "dataloader; FACTOR >= 0, 0 removes it), or sync=0: blocking calls no longer wait (their work "
            "stays).",
            list[str],
            parse=_causes,
            identity=_ones,
            describe=lambda o: ", ".join(f"{k}={v:g}" for k, v in o.set.items()),
        ),
    )
    kernels: Mapping[str, float] = option(
        {},
        Flag(
            "--kernels",
            "REGEX=FACTOR: device activities whose name matches REGEX take FACTOR x their time "
            "(e.g. 'gemm=0.25').",
            list[str],
            parse=_patterns_of("--kernels"),
            identity=_ones,
            describe=lambda o: ", ".join(f"kernels '{k}'={v:g}" for k, v in o.kernels.items()),
        ),
    )
    rank_host: Mapping[int, float] = option(
        {},
        Flag(
            "--rank-host",
            "RANK=FACTOR: scale all host time of one rank (what if the straggler were fast).",
            list[str],
            parse=_ranks,
            identity=_ones,
            describe=lambda o: ", ".join(f"rank {k} host={v:g}" for k, v in o.rank_host.items()),
        ),
    )
    comm: float = option(
        1.0,
        Flag(
            "--comm",
            "FACTOR: every collective's transfer (its time after the last rank arrived: NCCL kernels, a "
            "CPU backend's spans) takes FACTOR x its time, the ranks still meeting at each collective "
            "(0.001: the transfer free, a straggler still holds the others); 0 removes communication: no "
            "transfer, and no rank waits for another (what a run without communication does).",
            Optional[float],
            parse=_comm,
            identity=lambda v: v == 1.0,
            describe=lambda o: (
                "no communication (collectives free, ranks independent)"
                if o.comm == 0
                else f"collective transfer x{o.comm:g}"
                if o.comm != 1.0
                else None
            ),
        ),
    )
    python_speedup: Optional[float] = option(
        None,
        Flag(
            "--python-speedup",
            "S: Python bytecode runs S times faster (a pyperformance-style figure). With a calibration in "
            "the manifest, only the bytecode part of the host path between torch ops speeds up "
            "(tracekit.whatif.python); without one, interpreter time / S (an upper bound). Framework and "
            "launch stay.",
            Optional[float],
            parse=_speedup,
            identity=lambda v: v in (None, 1.0),
            describe=lambda o: (
                f"python {o.python_speedup:g}x faster (interpreter time / {o.python_speedup:g})"
                if o.python_speedup and o.python is None
                else None
            ),
        ),
    )
    # Calibrated into `python` before the replay (tracekit.whatif.check.python_scenario).
    python_from: Optional[str] = option(
        None,
        Flag(
            "--python-from",
            "B (a capture or run folder; several runs joined with ','): predict this capture under B's "
            "interpreter, from the two manifests' calibrations (a torch op called from Python, the "
            "machine-speed control divided out); B's measured step time is shown beside the prediction.",
            Optional[str],
            identity=lambda v: True,  # the calibrated `python` says what it changes
            describe=lambda o: str(o.python["text"]) if o.python is not None else None,
            json=False,
        ),
    )
    ops: Mapping[str, float] = option(
        {},
        Flag(
            "--ops",
            "REGEX=FACTOR: framework ops (cpu_op) whose name matches REGEX take FACTOR x their host time, "
            "and so does the device work they launch; 0 removes them, their syncs' waits included "
            "(e.g. 'aten::item=0').",
            list[str],
            parse=_patterns_of("--ops"),
            identity=_ones,
            describe=lambda o: ", ".join(f"ops '{k}'={v:g}" for k, v in o.ops.items()),
        ),
    )
    # The device work of each region launched as one CUDA graph (whatif/cudagraph.py); the regions are
    # the steps, or with `graph_region` the outermost host events whose name matches it.
    cuda_graphs: bool = option(
        False,
        Flag(
            "--cuda-graphs",
            "Predict the step with each step's device work launched as one CUDA graph: its interpreter, "
            "framework, launch and runtime time gone, one graph launch, kernels back to back at the "
            "graph-replay floor (kernel durations kept: what torch.compile's fusion would change is not "
            "predictable).",
            bool,
            describe=_graphs_text,
        ),
    )
    graph_region: Optional[str] = option(
        None,
        Flag(
            "--cuda-graphs-region",
            "REGEX: as --cuda-graphs, one graph per outermost host event (op, annotation, module) whose "
            "name matches, e.g. 'Optimizer.step' or 'nn.Module: Sequential'; the rest stays eager.",
            Optional[str],
            parse=_region,
            identity=lambda v: True,  # it implies cuda_graphs, which says it
        ),
    )
    # The DataLoader's worker count instead of the capture's (the unprofiled producer model only,
    # tracekit.whatif.loader); None keeps it.
    loader_workers: Optional[int] = option(
        None,
        Flag(
            "--loader-workers",
            "N: the DataLoader with N workers instead of the capture's (0 = load in the training "
            "process). Needs a capture that timed its fetches (tracekit capture); its producer's "
            "throughput is scaled by the worker count, up to the host's CPUs less one.",
            Optional[int],
            parse=_workers,
            describe=lambda o: (
                f"{o.loader_workers} DataLoader workers" if o.loader_workers is not None else None
            ),
        ),
    )
    # The copies from pageable host memory made from pinned memory without blocking: their runtime calls
    # return at once (tracekit.whatif.replay.pinned_factors).
    pin_memory: bool = option(
        False,
        Flag(
            "--pin-memory",
            "Predict the step with the copies from pageable host memory made from pinned memory with "
            "non_blocking=True: their runtime calls (and the stream sync of a blocking copy) no longer "
            "block the host, and each copy takes a pinned copy's time (1 µs + bytes at 55 GB/s, measured "
            "on H200 and H100 hosts).",
            bool,
            describe=lambda o: (
                "pageable copies from pinned memory, not blocking the host" if o.pin_memory else None
            ),
        ),
    )
    # Two knobs replayed as a whole, host and device (tracekit.whatif.knobs): the advice's layout and
    # precision rules give them.
    channels_last: bool = option(
        False,
        Flag(
            "--channels-last",
            "Predict the step with model and input in channels_last: cuDNN's layout conversions "
            "(nchwToNhwc / nhwcToNchw) go with their launch calls, and cuDNN's NCHW batch norm takes its "
            "NHWC kernels' time (3 passes forward, 5 backward over each input at the bandwidth the trace's "
            "elementwise kernels reach; needs record_shapes=True, else it keeps its time).",
            bool,
            describe=lambda o: "channels_last (layout conversions gone)" if o.channels_last else None,
        ),
    )
    autocast: Optional[str] = option(
        None,
        Flag(
            "--autocast",
            "bf16 | fp16: predict the step under autocast: fp32 and TF32 GEMMs and convolutions at the "
            "16-bit tensor-core peaks' ratio, and autocast's host work: a weight cast per GEMM or "
            "convolution op and a gradient cast per backward node, each priced as the trace's own "
            "one-kernel ops.",
            Optional[str],
            parse=_autocast,
            describe=lambda o: (
                f"autocast {o.autocast} (GEMMs and convolutions in 16 bits, casts added)"
                if o.autocast
                else None
            ),
        ),
    )
    unprofiled_step_ms: Optional[float] = option(
        None,
        Flag(
            "--unprofiled-step-ms",
            "The step time measured without the profiler (for traces without a tracekit manifest).",
            Optional[float],
            parse=_step_ms,
            identity=lambda v: True,  # how the prediction is made, not what changes
            json=False,
        ),
    )
    step: Optional[str] = option(None, STEP)  # the steps' marker (AnalyzeOptions.step)
    # The interpreter cause's factor from the calibrations (tracekit.whatif.python.PythonModel.to_json):
    # `python_from`, or `python_speedup` translated into host time. It replaces the plain 1/S.
    python: Optional[Mapping[str, Any]] = None

    def __post_init__(self) -> None:
        flags.parse_fields(self)
        if self.python_from is not None and self.python_speedup is not None:
            raise ScenarioError("--python-from and --python-speedup both given; choose one")
        if self.graph_region is not None:
            object.__setattr__(self, "cuda_graphs", True)

    @property
    def no_wait(self) -> bool:
        return self.set.get("sync", 1.0) == 0.0

    @property
    def reads_host(self) -> bool:
        """Whether the replay's factors read the host events (tracekit.whatif.replay.factors: the ops,
        pinned copies and CUDA-graph regions are found among them), so a Replayer without the frames must
        keep their columns."""
        return (
            bool(self.ops) or self.pin_memory or self.cuda_graphs or self.channels_last or bool(self.autocast)
        )

    def cause_factor(self, cause: str) -> float:
        f = float(self.set.get(cause, 1.0))
        if cause == "interpreter" and self.python is not None:
            f *= float(self.python["interpreter_factor"])
        elif cause == "interpreter" and self.python_speedup:
            f /= self.python_speedup
        return f

    @property
    def is_identity(self) -> bool:
        return flags.is_identity(self) and (
            self.python is None or float(self.python["interpreter_factor"]) == 1.0
        )

    def to_json(self) -> dict:
        doc = flags.to_json(self)
        if self.python is not None:
            doc["python"] = dict(self.python)
        return doc

    def describe(self) -> str:
        return ", ".join(flags.describe(self)) or "nothing changed"


__all__ = ["WhatIfOptions", "ScenarioError", "MAX_FACTOR"]
