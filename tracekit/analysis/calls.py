"""The runtime-call table: what each CUDA runtime, CUDA driver and HIP (ROCm) call does to the host
thread that makes it, by the name Kineto writes for it (docs/QUIRKS.md, "Runtime call names").

    kind            the host thread ...                                  host state (causes.py)
    device_sync     waits until all of its device's work is done         sync
    sync            waits for one stream or event                        sync
    copy            copies and returns when the copy is done (blocking)  sync
    copy_async      queues a copy or a set and returns                   launch
    kernel_launch   queues a kernel                                      launch
    graph_launch    queues a CUDA / HIP graph (its kernels carry the     launch
                    launch's correlation)
    stream_op       queues an event record, a wait or a host function    launch
    capture_begin   starts recording its stream's work into a graph      runtime
                    (the launches that follow are recorded, not run:
                    tracekit.analysis.graph_capture)
    capture_end     stops recording it                                   runtime
    instantiate     builds the recorded graph                            runtime
    other           anything else: allocation, context and module        runtime
                    creation, queries, a call this table does not know

Kineto writes a call under the name its runtime gives it, with version and per-thread-stream suffixes
(`cuMemcpyDtoH_v2`, `cudaLaunchKernel_ptsz`, `hipLaunchKernel_spt`, `cudaGraphLaunch_v10000`);
`base_name` strips them before the lookup. HIP calls come under the category `cuda_runtime`, like the
CUDA runtime's (Kineto files roctracer's and rocprofiler-sdk's HIP API records as CUDA_RUNTIME
activities). A name that is not in the table is `other`: it is never counted as a launch.

A copy from or to pageable host memory blocks whatever its call's name says (PAGEABLE_RE, on the copy's
device record): CUDA stages it through a pinned buffer, waiting for the copy's stream and then for the
copy, so a `cudaMemcpyAsync` of a 38 MB batch returned ~10 µs before its copy ended, after 35 ms behind
the previous step's kernels (the H100 captures of docs/results/advice). The frames put such a call in the
`sync` state where its copy began before the call returned (tracekit.analysis.events: a small copy that
fits the staging buffer returns first and stays a queued copy).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class CallKind(str, Enum):
    """What a runtime call does to its host thread (the module docstring's table)."""

    DEVICE_SYNC = "device_sync"
    SYNC = "sync"
    COPY = "copy"
    COPY_ASYNC = "copy_async"
    KERNEL_LAUNCH = "kernel_launch"
    GRAPH_LAUNCH = "graph_launch"
    STREAM_OP = "stream_op"
    CAPTURE_BEGIN = "capture_begin"
    CAPTURE_END = "capture_end"
    INSTANTIATE = "instantiate"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


# The calls that wait for device work, and those that queue it (the host states they put a thread in).
WAITS = (CallKind.DEVICE_SYNC, CallKind.SYNC, CallKind.COPY)
QUEUES = (CallKind.COPY_ASYNC, CallKind.KERNEL_LAUNCH, CallKind.GRAPH_LAUNCH, CallKind.STREAM_OP)
# The calls that neither wait nor queue: a graph capture's and anything the table does not name.
HOLDS = (CallKind.CAPTURE_BEGIN, CallKind.CAPTURE_END, CallKind.INSTANTIATE, CallKind.OTHER)

CUDA, DRIVER, HIP = "CUDA runtime", "CUDA driver", "HIP"


@dataclass(frozen=True)
class Call:
    """One runtime call: its base name (no suffix), its runtime and what it does."""

    name: str
    runtime: str
    kind: CallKind


def _rows(runtime: str, kind: CallKind, names: str) -> tuple[Call, ...]:
    return tuple(Call(n, runtime, kind) for n in names.split())


K = CallKind
CALLS: tuple[Call, ...] = (
    # -- CUDA runtime (cudart; CUPTI's runtime callback names) --
    *_rows(CUDA, K.DEVICE_SYNC, "cudaDeviceSynchronize cudaThreadSynchronize"),
    *_rows(CUDA, K.SYNC, "cudaStreamSynchronize cudaEventSynchronize"),
    # Copies that block their host thread until the copy is done (CUDA's "synchronous" copies; between
    # two device buffers one may return once the copy is queued: the trace does not say which it was).
    *_rows(
        CUDA,
        K.COPY,
        "cudaMemcpy cudaMemcpy2D cudaMemcpy3D cudaMemcpyPeer cudaMemcpy3DPeer cudaMemcpyToSymbol "
        "cudaMemcpyFromSymbol cudaMemcpyToArray cudaMemcpyFromArray cudaMemcpy2DToArray "
        "cudaMemcpy2DFromArray cudaMemcpyArrayToArray cudaMemcpy2DArrayToArray",
    ),
    *_rows(
        CUDA,
        K.COPY_ASYNC,
        "cudaMemcpyAsync cudaMemcpy2DAsync cudaMemcpy3DAsync cudaMemcpyPeerAsync cudaMemcpy3DPeerAsync "
        "cudaMemcpyToSymbolAsync cudaMemcpyFromSymbolAsync cudaMemcpyToArrayAsync cudaMemcpyFromArrayAsync "
        "cudaMemcpy2DToArrayAsync cudaMemcpy2DFromArrayAsync cudaMemset cudaMemset2D cudaMemset3D "
        "cudaMemsetAsync cudaMemset2DAsync cudaMemset3DAsync cudaMemPrefetchAsync",
    ),
    *_rows(
        CUDA,
        K.KERNEL_LAUNCH,
        "cudaLaunchKernel cudaLaunchKernelExC cudaLaunchCooperativeKernel "
        "cudaLaunchCooperativeKernelMultiDevice cudaLaunch",
    ),
    *_rows(CUDA, K.GRAPH_LAUNCH, "cudaGraphLaunch"),
    *_rows(
        CUDA,
        K.STREAM_OP,
        "cudaEventRecord cudaEventRecordWithFlags cudaStreamWaitEvent cudaLaunchHostFunc "
        "cudaStreamAddCallback",
    ),
    *_rows(CUDA, K.CAPTURE_BEGIN, "cudaStreamBeginCapture cudaStreamBeginCaptureToGraph"),
    *_rows(CUDA, K.CAPTURE_END, "cudaStreamEndCapture"),
    *_rows(
        CUDA,
        K.INSTANTIATE,
        "cudaGraphInstantiate cudaGraphInstantiateWithFlags cudaGraphInstantiateWithParams",
    ),
    # -- CUDA driver (CUPTI's driver callback names; Kineto records only some of them) --
    *_rows(DRIVER, K.DEVICE_SYNC, "cuCtxSynchronize"),
    *_rows(DRIVER, K.SYNC, "cuStreamSynchronize cuEventSynchronize"),
    *_rows(
        DRIVER,
        K.COPY,
        "cuMemcpy cuMemcpyDtoH cuMemcpyHtoD cuMemcpyDtoD cuMemcpyPeer cuMemcpy2D cuMemcpy2DUnaligned "
        "cuMemcpy3D cuMemcpy3DPeer cuMemcpyAtoH cuMemcpyHtoA cuMemcpyDtoA cuMemcpyAtoD cuMemcpyAtoA",
    ),
    *_rows(
        DRIVER,
        K.COPY_ASYNC,
        "cuMemcpyAsync cuMemcpyDtoHAsync cuMemcpyHtoDAsync cuMemcpyDtoDAsync cuMemcpyPeerAsync "
        "cuMemcpy2DAsync cuMemcpy3DAsync cuMemcpy3DPeerAsync cuMemcpyAtoHAsync cuMemcpyHtoAAsync "
        "cuMemsetD8 cuMemsetD16 cuMemsetD32 cuMemsetD2D8 cuMemsetD2D16 cuMemsetD2D32 cuMemsetD8Async "
        "cuMemsetD16Async cuMemsetD32Async cuMemsetD2D8Async cuMemsetD2D16Async cuMemsetD2D32Async "
        "cuMemPrefetchAsync",
    ),
    *_rows(
        DRIVER,
        K.KERNEL_LAUNCH,
        "cuLaunchKernel cuLaunchKernelEx cuLaunchCooperativeKernel cuLaunchCooperativeKernelMultiDevice "
        "cuLaunch cuLaunchGrid cuLaunchGridAsync",
    ),
    *_rows(DRIVER, K.GRAPH_LAUNCH, "cuGraphLaunch"),
    *_rows(
        DRIVER,
        K.STREAM_OP,
        "cuEventRecord cuEventRecordWithFlags cuStreamWaitEvent cuLaunchHostFunc cuStreamAddCallback "
        "cuStreamWaitValue32 cuStreamWaitValue64 cuStreamWriteValue32 cuStreamWriteValue64",
    ),
    *_rows(DRIVER, K.CAPTURE_BEGIN, "cuStreamBeginCapture cuStreamBeginCaptureToGraph"),
    *_rows(DRIVER, K.CAPTURE_END, "cuStreamEndCapture"),
    *_rows(
        DRIVER, K.INSTANTIATE, "cuGraphInstantiate cuGraphInstantiateWithFlags cuGraphInstantiateWithParams"
    ),
    # -- HIP (ROCm; roctracer's and rocprofiler-sdk's HIP API names) --
    *_rows(HIP, K.DEVICE_SYNC, "hipDeviceSynchronize hipCtxSynchronize"),
    *_rows(HIP, K.SYNC, "hipStreamSynchronize hipEventSynchronize"),
    # hipMemcpyWithStream is the copy torch makes for a blocking (non_blocking=False) copy on ROCm: it
    # returns once the copy is done.
    *_rows(
        HIP,
        K.COPY,
        "hipMemcpy hipMemcpyWithStream hipMemcpyDtoH hipMemcpyHtoD hipMemcpyDtoD hipMemcpyPeer hipMemcpy2D "
        "hipMemcpy3D hipMemcpyParam2D hipMemcpyToSymbol hipMemcpyFromSymbol hipMemcpyToArray "
        "hipMemcpyFromArray hipMemcpy2DToArray hipMemcpy2DFromArray hipMemcpyAtoH hipMemcpyHtoA",
    ),
    *_rows(
        HIP,
        K.COPY_ASYNC,
        "hipMemcpyAsync hipMemcpyDtoHAsync hipMemcpyHtoDAsync hipMemcpyDtoDAsync hipMemcpyPeerAsync "
        "hipMemcpy2DAsync hipMemcpy3DAsync hipMemcpyParam2DAsync hipMemcpyToSymbolAsync "
        "hipMemcpyFromSymbolAsync hipMemcpy2DToArrayAsync hipMemcpy2DFromArrayAsync hipMemset hipMemset2D "
        "hipMemset3D hipMemsetAsync hipMemset2DAsync hipMemset3DAsync hipMemsetD8 hipMemsetD16 "
        "hipMemsetD32 hipMemsetD8Async hipMemsetD16Async hipMemsetD32Async hipMemPrefetchAsync",
    ),
    *_rows(
        HIP,
        K.KERNEL_LAUNCH,
        "hipLaunchKernel hipExtLaunchKernel hipLaunchCooperativeKernel hipLaunchCooperativeKernelMultiDevice "
        "hipModuleLaunchKernel hipExtModuleLaunchKernel hipHccModuleLaunchKernel "
        "hipModuleLaunchCooperativeKernel hipModuleLaunchCooperativeKernelMultiDevice "
        "hipExtLaunchMultiKernelMultiDevice hipLaunchKernelExC",
    ),
    *_rows(HIP, K.GRAPH_LAUNCH, "hipGraphLaunch"),
    *_rows(
        HIP,
        K.STREAM_OP,
        "hipEventRecord hipEventRecordWithFlags hipStreamWaitEvent hipLaunchHostFunc hipStreamAddCallback "
        "hipStreamWaitValue32 hipStreamWaitValue64 hipStreamWriteValue32 hipStreamWriteValue64",
    ),
    *_rows(HIP, K.CAPTURE_BEGIN, "hipStreamBeginCapture hipStreamBeginCaptureToGraph"),
    *_rows(HIP, K.CAPTURE_END, "hipStreamEndCapture"),
    *_rows(
        HIP, K.INSTANTIATE, "hipGraphInstantiate hipGraphInstantiateWithFlags hipGraphInstantiateWithParams"
    ),
)
del K

# A copy whose host side is pageable memory (the device record's name: Kineto's `Memcpy HtoD (Pageable ->
# Device)`, `Memcpy DtoH (Device -> Pageable)`).
PAGEABLE_RE = r"Memcpy (?:HtoD|DtoH) \(.*Pageable"

BY_NAME: dict[str, Call] = {c.name: c for c in CALLS}
assert len(BY_NAME) == len(CALLS), "a call is in the table twice"

# Suffixes a runtime adds to a call's name: an API version (`_v2`, `_v3020`: CUPTI's names carry the CUDA
# version that introduced the call, which Kineto strips since 2026-05 when it has 4+ digits), the
# per-thread default stream (CUDA `_ptsz` / `_ptds`, HIP `_spt`), in any order.
_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")


def base_name(name: str) -> str:
    """A call's name without its version and per-thread-stream suffixes: cuMemcpyDtoH_v2 → cuMemcpyDtoH."""
    return _SUFFIX.sub("", name)


def call_kind(name: str) -> CallKind:
    """What the call `name` (as Kineto wrote it) does; `other` for a call the table does not know."""
    call = BY_NAME.get(name) or BY_NAME.get(base_name(name))
    return call.kind if call is not None else CallKind.OTHER


__all__ = [
    "CallKind",
    "Call",
    "CALLS",
    "BY_NAME",
    "WAITS",
    "QUEUES",
    "HOLDS",
    "PAGEABLE_RE",
    "base_name",
    "call_kind",
]
