"""What torch.compile's code did in the steps, named from the framework ops it records (torch 2.11 on the
H200, 2.13 on CPU: every marker below is a `cpu_op`, so its time is `framework` by rule 3 wherever no
runtime call is innermost; docs/QUIRKS.md):

    TorchDynamo Cache Lookup                Dynamo's guard check before a compiled frame runs
    Torch-Compiled Region: F/C              a compiled frame running: frame F, compile C (C > 0: recompiled)
    ## Call CompiledFxGraph <hash> ##       inductor's generated wrapper (its Python between kernel launches)
    triton_poi_fused_addmm_relu_0           a Triton kernel's launcher (cpu_op) and the kernel (same name)
    entire_frame_compile                    Dynamo compiling a frame (a cache miss: first step, recompile)
    entire_backward_compile                 AOTAutograd compiling the backward on its first run

Pure: a `CompiledSummary` from the report's op and kernel statistics, None when nothing was compiled.
"""

from __future__ import annotations

import re
from typing import Optional

from tracekit.analysis.model import CompiledRegion, CompiledSummary, KernelStat, OpStat

GUARD_OP = "TorchDynamo Cache Lookup"
REGION_RE = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
WRAPPER_RE = re.compile(r"^## Call CompiledFxGraph .* ##$")
TRITON_PREFIX = "triton_"
# Outermost compile phases (torch >= 2.5); older torch: Dynamo's compile itself.
COMPILE_OPS = ("entire_frame_compile", "entire_backward_compile")
COMPILE_FALLBACK = "_compile.compile_inner (dynamo_timed)"


def compiled_summary(
    op_stats: tuple[OpStat, ...], kernel_stats: tuple[KernelStat, ...] | list[KernelStat]
) -> Optional[CompiledSummary]:
    """The summary, or None when no compiled frame ran in the steps."""
    by_name = {o.name: o for o in op_stats}
    regions = []
    for o in op_stats:
        m = REGION_RE.match(o.name)
        if m:
            n = max(len(o.steps), 1)
            frame, cid = int(m.group(1)), int(m.group(2))
            regions.append(CompiledRegion(o.name, frame, cid, o.calls / n, sum(o.ns_per_step) / n / 1e6))
    compile_ops = [by_name[c] for c in COMPILE_OPS if c in by_name]
    if not compile_ops and COMPILE_FALLBACK in by_name:
        compile_ops = [by_name[COMPILE_FALLBACK]]
    if not regions and not compile_ops:
        return None
    steps = max((len(o.steps) for o in op_stats), default=1) or 1
    per_step: dict[int, float] = {}
    for o in compile_ops:
        for s, ns in zip(o.steps, o.ns_per_step):
            if ns:
                per_step[s] = per_step.get(s, 0.0) + ns / 1e6
    triton = [k for k in kernel_stats if k.name.startswith(TRITON_PREFIX)]
    guard = by_name.get(GUARD_OP)
    wrapper = sum(sum(o.ns_per_step) for o in op_stats if WRAPPER_RE.match(o.name))
    return CompiledSummary(
        regions=tuple(sorted(regions, key=lambda r: (r.frame, r.compile_id))),
        recompiled_frames=tuple(sorted({r.frame for r in regions if r.compile_id > 0})),
        guard_ms_per_step=sum(guard.ns_per_step) / steps / 1e6 if guard else 0.0,
        wrapper_ms_per_step=wrapper / steps / 1e6,
        compile_ms_by_step=tuple(sorted(per_step.items())),
        triton_kernels_per_step=sum(k.kernel.count for k in triton) / steps,
        triton_kernel_ms_per_step=sum(k.kernel.total_ns for k in triton) / steps / 1e6,
    )


__all__ = ["compiled_summary"]
