"""How a training step runs: eager (one launch per kernel), the whole step as one CUDA graph, or the
model through torch.compile — so that a user captures A/B pairs of one workload in two commands:

    tracekit capture heavy_mlp --set hidden=512 --set layers=24 --set batch_size=64 ...
    tracekit capture heavy_mlp --set hidden=512 ... --set cuda_graphs=true

`cuda_graphs=true`: the step (forward, backward, optimizer step, every micro-batch) is captured once
after `GRAPH_WARMUP` eager steps on a side stream (what torch's "whole network capture" recipe does),
with static input tensors, then replayed: each step copies its batch into the static inputs and calls
`graph.replay()` (one `cudaGraphLaunch`). The optimizer runs with `capturable=True` where it has that
option (Adam); a blocking call (a sync, `.item()`, GradScaler's inf check) cannot be captured, so the
knobs that make one are refused. The Python the step runs (host_spin_us) runs at capture only.
`compile=true`: the model is `torch.compile(model, mode=compile_mode, backend=compile_backend)`; the
first steps (untimed warm-up) compile it. Stdlib + torch, torch imported inside functions.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Sequence

from tracekit.capture.knobs import Knob, KnobError

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
MODE_KNOBS = (
    Knob(
        "cuda_graphs",
        False,
        "CUDA: capture the whole step (forward, backward, optimizer) once as one CUDA graph and replay it "
        "with static inputs (one cudaGraphLaunch per step)",
    ),
    Knob("compile", False, "run the model through torch.compile (compiled in the first, untimed, steps)"),
    Knob("compile_mode", "default", "torch.compile mode (with compile=true)", choices=COMPILE_MODES),
    Knob(
        "compile_backend",
        "inductor",
        "torch.compile backend (with compile=true); aot_eager/eager compile nothing (quick checks)",
        choices=("inductor", "aot_eager", "eager"),
    ),
)
# Eager steps run on a side stream before the capture (torch's recipe: lazy init, cuBLAS workspaces,
# the optimizer's state, allocated outside the graph's private pool).
GRAPH_WARMUP = 3


def check_modes(device: str, knobs: Dict[str, Any], refused: Dict[str, bool]) -> None:
    """KnobError (one line) for a combination that cannot run: `refused` names the other knobs that
    are on and that a CUDA graph cannot hold (a blocking call, DDP's hooks, recomputation)."""
    graphs, comp = bool(knobs.get("cuda_graphs")), bool(knobs.get("compile"))
    if graphs and device != "cuda":
        raise KnobError(
            f"--set cuda_graphs=true needs a CUDA device; this capture runs on {device} "
            "(drop cuda_graphs, or capture on a GPU)"
        )
    if graphs and comp:
        raise KnobError(
            "--set cuda_graphs=true and compile=true: pick one (compile_mode=reduce-overhead makes "
            "torch.compile capture CUDA graphs itself)"
        )
    if graphs:
        for name, on in refused.items():
            if on:
                raise KnobError(f"--set cuda_graphs=true cannot capture {name}: turn it off")
    if comp and float(knobs.get("host_spin_us", 0.0)) > 0:
        raise KnobError(
            "--set compile=true with host_spin_us > 0: Dynamo would unroll the spin loop into the graph; "
            "set host_spin_us=0"
        )


def compiled(model: Any, knobs: Dict[str, Any]) -> Any:
    """The model through torch.compile when `compile=true`, else itself."""
    if not knobs.get("compile"):
        return model
    import torch

    if not hasattr(torch, "compile"):
        raise KnobError(f"--set compile=true needs torch >= 2.0 (this is {torch.__version__})")
    mode = knobs.get("compile_mode", "default")
    return torch.compile(model, mode=None if mode == "default" else mode, backend=knobs["compile_backend"])


def make_capturable(optimizer: Any) -> None:
    """Optimizers with a `capturable` option (Adam, AdamW, ...) keep their step count on the device, as a
    graph needs; set before their state exists (the warm-up steps create it)."""
    if optimizer is None:
        return
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True


class GraphedStep:
    """The step as one CUDA graph: `run(batches)` copies the micro-batches into the static inputs and
    replays; the first call warms up, captures, and then replays (see the module docstring)."""

    def __init__(self) -> None:
        self.graph: Any = None
        self.static: List[List[Any]] = []
        self.loss: Any = None
        self.extra: Dict[str, Any] = {}

    def run(self, batches: Sequence[Sequence[Any]], body: Callable[[Sequence[Sequence[Any]]], Any]) -> Any:
        """`body(micro-batches)` runs one eager step and returns its loss (used at the first call only)."""
        if self.graph is None:
            self.capture(batches, body)
        for static, new in zip(self.static, batches):
            for s, n in zip(static, new):
                s.copy_(n, non_blocking=True)
        self.graph.replay()
        return self.loss

    def capture(self, batches: Sequence[Sequence[Any]], body: Callable[[Any], Any]) -> None:
        """Warm up on a side stream and capture `body` over static copies of `batches`."""
        import torch

        self.static = [[t.clone() for t in b] for b in batches]
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                body(self.static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = body(self.static)
        torch.cuda.synchronize()
        self.extra = {
            "warmup_steps": GRAPH_WARMUP,
            "capture_ms": round((time.perf_counter() - t0) * 1e3, 3),
        }


def autocast_cache(graphs: bool) -> Any:
    """torch.autocast's keyword for a graph capture: its weight cast cache must be off (torch's CUDA graph
    notes), else a replay reuses casts of the capture's weights."""
    return {"cache_enabled": False} if graphs else {}
