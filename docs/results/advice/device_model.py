"""The device side of the channels_last and autocast knobs against the kernels B really ran
(docs/results/advice.md): per pair, A's kernels per profiled step by class, as the trace holds them and
as the knob's factors make them (tracekit.whatif.knobs: layout_factors, autocast_factors), beside B's.

    .venv/bin/python docs/results/advice/device_model.py [--summary] [--plain] [DATA_DIR ...]

--summary: one row per pair (the device's step); --plain: the autocast model without its batch-norm and
elementwise terms (GEMMs and convolutions at the peaks' ratio alone, as it was before them). DATA_DIR
defaults to data/.

A kernel counts in a step when its launch lies in the profiled steps' host windows (the device work a
capture begins with, launched in the warm-up step, is not a step's). Classes are explain.py's. Needs
both configurations' run folders (DATA_DIR/runs/<config>/). Prints Markdown tables.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

import tracekit as tk
from tracekit.whatif import knobs
from tracekit.whatif.knobs import autocast_factors, layout_factors
from tracekit.whatif.predict import Replayer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain import CLASSES  # noqa: E402

HERE = Path(__file__).resolve().parent
# (A, B, knob): the knob that turns A into B
PAIRS = (
    ("r18", "r18_bf16", "autocast"),
    ("r18_cl", "r18_cl_bf16", "autocast"),
    ("r50", "r50_bf16", "autocast"),
    ("r50_cl", "r50_cl_bf16", "autocast"),
    ("r50big", "r50big_bf16", "autocast"),
    ("r50big_cl", "r50big_cl_bf16", "autocast"),
    ("effnet", "effnet_bf16", "autocast"),
    ("effnet_cl", "effnet_cl_bf16", "autocast"),
    ("dense", "dense_bf16", "autocast"),
    ("mnv2", "mnv2_bf16", "autocast"),
    ("cnx", "cnx_bf16", "autocast"),
    ("rnx", "rnx_bf16", "autocast"),
    ("mnv3p", "mnv3p_bf16", "autocast"),
    ("regp", "regp_bf16", "autocast"),
    ("vit", "vit_bf16", "autocast"),
    ("gpt2", "gpt2_bf16", "autocast"),
    ("shf", "shf_bf16", "autocast"),
    ("vgg", "vgg_bf16", "autocast"),
    ("sqz", "sqz_bf16", "autocast"),
    ("swin", "swin_bf16", "autocast"),
    ("wrn", "wrn_bf16", "autocast"),
    ("maxv", "maxv_bf16", "autocast"),
    ("r152", "r152_bf16", "autocast"),
    ("vitb", "vitb_bf16", "autocast"),
    ("effv2", "effv2_bf16", "autocast"),
    ("vitb32", "vitb32_bf16", "autocast"),
    ("cnxs", "cnxs_bf16", "autocast"),
    ("r18", "r18_cl", "channels_last"),
    ("r50", "r50_cl", "channels_last"),
    ("r50big", "r50big_cl", "channels_last"),
    ("effnet", "effnet_cl", "channels_last"),
    ("dense", "dense_cl", "channels_last"),
    ("mnv2", "mnv2_cl", "channels_last"),
    ("cnx", "cnx_cl", "channels_last"),
    ("rnx", "rnx_cl", "channels_last"),
    ("mnv3p", "mnv3p_cl", "channels_last"),
    ("regp", "regp_cl", "channels_last"),
    ("shf", "shf_cl", "channels_last"),
    ("vgg", "vgg_cl", "channels_last"),
    ("sqz", "sqz_cl", "channels_last"),
    ("swin", "swin_cl", "channels_last"),
    ("wrn", "wrn_cl", "channels_last"),
    ("maxv", "maxv_cl", "channels_last"),
    ("r152", "r152_cl", "channels_last"),
    ("vitb", "vitb_cl", "channels_last"),
    ("effv2", "effv2_cl", "channels_last"),
    ("vitb32", "vitb32_cl", "channels_last"),
    ("cnxs", "cnxs_cl", "channels_last"),
)


def in_steps(rp: Replayer) -> np.ndarray:
    """Per device activity: whether its launch lies in the profiled steps' host windows."""
    st = rp.graph.steps
    launch = rp.graph.device["launch_ts"].to_numpy(np.float64)
    return (launch >= float(st["ts"].min())) & (launch <= float(st["end"].max()))


def by_class(rp: Replayer, factor: np.ndarray) -> dict[str, float]:
    """ms per profiled step by kernel class, each activity x its factor, launched in the steps."""
    dev = rp.graph.device
    dur = (dev["end"] - dev["ts"]).to_numpy(np.float64) * factor
    keep = in_steps(rp)
    cls = np.array([next(c for c, rx in CLASSES if re.search(rx, str(n))) for n in dev["name"]])
    n = max(len(rp.graph.steps), 1)
    out = {c: float(dur[keep & (cls == c)].sum()) / 1e6 / n for c, _ in CLASSES}
    out["device total"] = float(dur[keep].sum()) / 1e6 / n
    return out


def compared(data: Path, a: str, b: str, knob: str) -> tuple[dict, dict, dict]:
    """(A's classes, the model's B, B's) in ms per profiled step."""
    ra = Replayer.of(tk.load(data / "runs" / a))
    rb = Replayer.of(tk.load(data / "runs" / b))
    g, host = ra.graph, ra.frames.host
    f = (autocast_factors(g, host, "bf16") if knob == "autocast" else layout_factors(g, host)).act
    return by_class(ra, np.ones(len(f))), by_class(ra, f), by_class(rb, np.ones(len(rb.graph.device)))


def table(data: Path, a: str, b: str, knob: str) -> str:
    was, model, got = compared(data, a, b, knob)
    rows = [
        f"**{data.name}: {a} → {b}** ({knob}), ms per profiled step",
        "",
        f"| class | {a} | the model's {b} | {b} measured | model − measured |",
        "|---|---|---|---|---|",
    ]
    for c in [c for c, _ in CLASSES] + ["device total"]:
        if was[c] or got[c]:
            rows.append(f"| {c} | {was[c]:.3f} | {model[c]:.3f} | {got[c]:.3f} | {model[c] - got[c]:+.3f} |")
    return "\n".join(rows)


def summary_row(data: Path, a: str, b: str, knob: str) -> str:
    was, model, got = compared(data, a, b, knob)
    t = "device total"
    err = model[t] - got[t]
    return (
        f"| {data.name}: {a} → {b} | {knob} | {was[t]:.3f} | {model[t]:.3f} | {got[t]:.3f} | {err:+.3f} "
        f"({err / got[t]:+.1%}) |"
    )


def main(argv: list[str]) -> int:
    summary = "--summary" in argv
    if "--plain" in argv:
        knobs.BF16_BATCHNORM_OVER_CUDNN_NCHW = 1.0
        knobs.HALF_BYTES = 1.0
    datas = [Path(x) for x in argv if not x.startswith("--")] or [HERE / "data"]
    out = []
    for data in datas:
        for a, b, knob in PAIRS:
            if (data / "runs" / a).is_dir() and (data / "runs" / b).is_dir():
                out.append(summary_row(data, a, b, knob) if summary else table(data, a, b, knob))
    if summary:
        head = (
            "| capture: A → B | knob | A's device, ms/step | the model's B | B measured | model − measured |"
            "\n"
            "|---|---|---|---|---|---|"
        )
        print(head + "\n" + "\n".join(out))
    else:
        print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
