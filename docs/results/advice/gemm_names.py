"""Which kernels a GPU's GEMMs and convolutions run, by precision, and whether tracekit's precision
patterns (tracekit.analysis.advice TF32_RE / FP32_RE) see them: a matmul, a linear and a convolution in
fp32 (TF32 off, then on), bf16 and fp16, profiled; prints one line per kernel (precision, time, matched
class, name). Needs torch and a CUDA device.

    python docs/results/advice/gemm_names.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tracekit.analysis.advice import _LOW, FP32_RE, TF32_RE  # noqa: E402


def work(dtype: torch.dtype, n: int = 2048) -> None:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    lin = torch.nn.Linear(n, n, device="cuda", dtype=dtype)
    conv = torch.nn.Conv2d(64, 128, 3, padding=1, device="cuda", dtype=dtype)
    x = torch.randn(32, 64, 56, 56, device="cuda", dtype=dtype, requires_grad=True)
    for _ in range(2):
        a @ b
        lin(a).sum().backward()
        conv(x).sum().backward()
    torch.cuda.synchronize()


def main() -> int:
    cases = (
        ("fp32, TF32 off", torch.float32, False),
        ("fp32, TF32 on", torch.float32, True),
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, False),
    )
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    for label, dtype, tf32 in cases:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        work(dtype)  # warm: algorithm choice
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            work(dtype)
        seen: dict = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                seen.setdefault(e.name, 0.0)
                seen[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        for name, us in sorted(seen.items(), key=lambda kv: -kv[1]):
            cls = (
                "TF32"
                if re.search(TF32_RE, name)
                else "FP32"
                if re.search(FP32_RE, name)
                else "16-bit"
                if re.search(_LOW, name)
                else "-"
            )
            print(f"{label:15s} {us:10.1f} us  {cls:6s}  {name[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
