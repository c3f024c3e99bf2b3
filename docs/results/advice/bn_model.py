"""The channels_last knob's batch-norm model against the kernels channels_last really ran
(docs/results/advice.md): for each NCHW capture, its NCHW batch norm per profiled step (cuDNN's in fp32,
torch's own under bf16), the time the model gives it under channels_last (tracekit.whatif.knobs.
_nhwc_batch_norm: 3 passes forward, 5 backward, over each op's input at the trace's own elementwise
bandwidth), and the channels_last kernels' time in the same model's channels_last capture of the run.

    .venv/bin/python docs/results/advice/bn_model.py [DATA_DIR ...]    # default: data/ (run folders)

Prints a Markdown table. Needs the run folders of both configurations (data/runs/<config>/).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional

import numpy as np

import tracekit as tk
from tracekit.analysis.advice import CUDNN_BATCHNORM_RE, NCHW_BATCHNORM_RE, TORCH_NCHW_BATCHNORM_RE
from tracekit.whatif.knobs import _names_match, _nhwc_batch_norm
from tracekit.whatif.predict import Replayer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_model import in_steps  # noqa: E402

HERE = Path(__file__).resolve().parent
PAIRS = (
    ("r18", "r18_cl"),
    ("r50", "r50_cl"),
    ("r18_bf16", "r18_cl_bf16"),
    ("r50_bf16", "r50_cl_bf16"),
    ("r50big", "r50big_cl"),
    ("r50big_bf16", "r50big_cl_bf16"),
    ("effnet", "effnet_cl"),
    ("effnet_bf16", "effnet_cl_bf16"),
    ("dense", "dense_cl"),
    ("mnv2", "mnv2_cl"),
    ("cnx", "cnx_cl"),
    ("rnx", "rnx_cl"),
    ("mnv3p", "mnv3p_cl"),
    ("regp", "regp_cl"),
    ("denseb", "denseb_cl"),
    ("mnv2b", "mnv2b_cl"),
    ("regb", "regb_cl"),
    ("rnxb", "rnxb_cl"),
)
# the batch norm of B: cuDNN's NHWC kernels (fp32), torch's channels_last ones (bf16)
CHANNELS_LAST_BATCHNORM_RE = rf"{CUDNN_BATCHNORM_RE}|batch_norm_\w*channels_last_kernel"


def per_step_ms(rp: Replayer, mask: np.ndarray, factor: np.ndarray) -> float:
    """The device time of the activities `mask` selects, each x its factor, per profiled step (ms): those
    launched in the steps (device_model.in_steps)."""
    dev = rp.graph.device
    dur = (dev["end"] - dev["ts"]).to_numpy(np.float64)
    return float((dur * factor)[mask & in_steps(rp)].sum()) / 1e6 / max(len(rp.graph.steps), 1)


def row(data: Path, a: str, b: str) -> Optional[str]:
    ra = Replayer.of(tk.load(data / "runs" / a))
    rb = Replayer.of(tk.load(data / "runs" / b))
    names_a = ra.graph.device["name"].astype(str)
    nchw = _names_match(names_a, re.compile(f"{NCHW_BATCHNORM_RE}|{TORCH_NCHW_BATCHNORM_RE}"))
    f, note = _nhwc_batch_norm(ra.graph, ra.frames.host)
    ones = np.ones(len(names_a))
    nhwc_b = _names_match(rb.graph.device["name"].astype(str), re.compile(CHANNELS_LAST_BATCHNORM_RE))
    got = per_step_ms(rb, nhwc_b, np.ones(len(nhwc_b)))
    pred = per_step_ms(ra, nchw, f)
    if not got:  # a model without batch norm (ConvNeXt): no row
        return None
    gbps = re.search(r"at the (\d+) GB/s", note)
    return (
        f"| {data.name}/{a} → {b} | {per_step_ms(ra, nchw, ones):.3f} | {pred:.3f} | {got:.3f} | "
        f"{(pred - got) / got:+.1%} | {gbps.group(1) if gbps else '-'} |"
    )


def main(argv: list[str]) -> int:
    datas = [Path(a) for a in argv] or [HERE / "data"]
    lines = [
        "| capture: NCHW → channels_last | NCHW batch norm, ms/step | model's channels_last, ms/step | "
        "channels_last measured, ms/step | model error | elementwise GB/s |",
        "|---|---|---|---|---|---|",
    ]
    for data in datas:
        for a, b in PAIRS:
            if (data / "runs" / a).is_dir() and (data / "runs" / b).is_dir():
                line = row(data, a, b)
                if line:
                    lines.append(line)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
