"""Traces no one here made (issue 37): PyTorch profiler traces other projects publish (AMD's TraceLens,
Meta's PARAM, kineto's TensorBoard plugin samples), NVIDIA and AMD, training and inference. Where each
comes from and its licence: SOURCES.md beside them; what tracekit says of each, checked by hand:
docs/results/public_traces.md.

They are data fetched from public repositories, kept out of this repository (.gitignore `/shared/`):
laid in the steering repo's shared/traces/public (../shared beside a checkout, as for CI) or in this
checkout's shared/traces/public. Without them these tests skip."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import tracekit as tk
from tracekit.analysis.events import load_frames
from tracekit.analysis.invariants import check_invariants
from tracekit.analysis.model import CAUSES
from tracekit.analysis.pipeline import analyze
from tracekit.parse.parser import parse_paths

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = next(
    (
        p
        for p in (ROOT.parent / "shared" / "traces" / "public", ROOT / "shared" / "traces" / "public")
        if p.is_dir()
    ),
    None,
)
needs_public = pytest.mark.skipif(PUBLIC is None, reason="the public traces are not laid out here")

# trace -> (the rule that finds its steps, steps, records a graph capture). Counted by hand in each file
# (docs/results/public_traces.md): the annotations or ProfilerStep spans named, or, for "none", one
# iteration only (a request, a split-out step, a capture).
EXPECTED = {
    "kineto/resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz": ("ProfilerStep", 6, False),
    "kineto/resnet50_num_workers_4.worker0.1623212756351.pt.trace.json.gz": ("ProfilerStep", 6, False),
    "param/linear_kineto.json.gz": ("annotation", 40, False),
    "param/resnet_kineto.json.gz": ("annotation", 30, False),
    "tracelens/b200_vllm_eager_trace.json.gz": ("none", 1, False),
    "tracelens/h100_bert-small-uncased.json.gz": ("ProfilerStep", 1, False),
    "tracelens/h100_qwen1.5-0.5b-chat.json.gz": ("ProfilerStep", 1, False),
    "tracelens/mi210_gpu_only_trace.json.gz": ("none", 1, False),
    "tracelens/mi300_bert-small-uncased.json.gz": ("ProfilerStep", 1, False),
    "tracelens/mi300_qwen1.5-0.5b-chat.json.gz": ("ProfilerStep", 1, False),
    "tracelens/mi300_resnet_act_checkpoint.json.gz": ("ProfilerStep", 3, False),
    "tracelens/mi300_torch_compile_triton.json.gz": ("none", 1, False),
    "tracelens/sglang_decode_graph_capture_bs32.json.gz": ("ProfilerStep", 1, True),
    "tracelens/sglang_qwen3-8b_decode.json.gz": ("none", 1, False),
    "tracelens/sglang_qwen3-8b_prefilldecode.json.gz": ("none", 1, False),
    "tracelens/vllm_decode_full_graph_capture.pt.trace.json.gz": ("none", 1, True),
    "tracelens/vllm_decode_full_graph_execution.json.gz": ("none", 1, False),
    "tracelens/vllm_prefilldecode_piecewise_graph_execution.json.gz": ("none", 1, False),
}
SCHEMA = json.loads((ROOT / "tracekit" / "render" / "report.schema.json").read_text())


@needs_public
def test_every_public_trace_is_expected():
    laid = {f"{p.parent.name}/{p.name}" for p in PUBLIC.glob("*/*.gz")}  # type: ignore[union-attr]
    assert laid == set(EXPECTED)


@needs_public
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_trace_end_to_end(name):
    rule, steps, captured = EXPECTED[name]
    cap = parse_paths([PUBLIC / name])  # type: ignore[operator]
    report = analyze(cap)
    check_invariants(report, cap)
    (found,) = report.step_rules
    assert (found.rule, max(found.steps, 1)) == (rule, steps)
    assert bool(report.graph_captures) is captured
    for d in report.devices:  # no impossible figure
        assert 0.0 <= d.gpu_utilization <= 1.0
        for s in d.samples:
            assert s.dur_ns > 0 and s.busy_ns >= 0 and all(s.idle_ns[c] >= 0 for c in CAUSES)
            assert s.busy_ns + sum(s.idle_ns.values()) == s.dur_ns
    for g in report.graph_captures:
        assert 0.0 <= g.share_of_steps <= 1.0 and g.launches > 0
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report.to_json(), SCHEMA)


@needs_public
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ["param/linear_kineto.json.gz", "param/resnet_kineto.json.gz"])
def test_found_steps_replay_as_observed(name):
    # the what-if replay applies the same step definition to the steps found: unchanged, it reproduces them
    w = tk.whatif(PUBLIC / name)  # type: ignore[operator]
    (d,) = w.result.devices
    assert abs(d.replay_error) <= 0.02
    assert len(d.steps) == EXPECTED[name][1]


@needs_public
def test_found_steps_are_the_annotations_period():
    # linear_kineto: 40 Optimizer.zero_grad annotations on one thread, no ProfilerStep. Each step runs from
    # one zero_grad to the next: its host window is their spacing (the last: its median period of work)
    cap = parse_paths([PUBLIC / "param" / "linear_kineto.json.gz"])  # type: ignore[operator]
    fr = load_frames(cap.table)
    zero = fr.host[fr.host["name"].astype(str) == "Optimizer.zero_grad#SGD.zero_grad"]
    starts = np.sort(zero["ts"].to_numpy())
    assert fr.steps["ts"].tolist() == starts.tolist()
    assert fr.steps["end"].tolist()[:-1] == starts[1:].tolist()
    # the 0.99 s CUDA start-up before the first iteration is in no step
    report = analyze(cap)
    assert max(g.dur_ns for g in report.top_gaps) < 50_000_000


@needs_public
def test_a_marker_names_other_steps():
    # the same trace with --step naming the optimizer's step: 40 steps, each from one step to the next
    cap = parse_paths([PUBLIC / "param" / "linear_kineto.json.gz"])  # type: ignore[operator]
    fr = load_frames(cap.table, marker=re.compile(r"^Optimizer\.step#"))
    assert len(fr.steps) == 40 and fr.step_rules[0].rule == "marker"


@needs_public
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_more_loader_workers_less_dataloader_idle():
    # kineto's samples: the same ResNet-50 with num_workers 0, then 4 (V100)
    a, b = (
        tk.analyze(
            PUBLIC / "kineto" / f"resnet50_num_workers_{w}.worker0.{ts}.pt.trace.json.gz", savings=False
        )  # type: ignore[operator]
        for w, ts in ((0, "1623143089861"), (4, "1623212756351"))
    )
    dl = [r.report.devices[0].idle_ms_per_step["dataloader"] for r in (a, b)]
    assert dl[0] > 40 and dl[1] < dl[0] / 10  # ms per step: 58.7 against 1.2
    figures = tk.diff(a, b).figures()
    row = figures[figures["figure"] == "idle: dataloader"].iloc[0]
    assert row["value_b"] < row["value_a"] and row["significant"]


@needs_public
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "name", ["tracelens/sglang_qwen3-8b_decode.json.gz", "tracelens/sglang_qwen3-8b_prefilldecode.json.gz"]
)
def test_a_rocm_blocking_copy_is_sync_with_its_line_not_launch(name):
    # the SGLang traces (MI300X): the host blocked ~0.5 s in hipMemcpyWithStream while the device idled,
    # a kernel launched before it pending throughout (docs/QUIRKS.md)
    report = analyze(parse_paths([PUBLIC / name]))  # type: ignore[operator]
    (d,) = report.devices
    idle = {c: sum(s.idle_ns[c] for s in d.samples) for c in CAUSES}
    assert max(idle, key=idle.get) == "sync" and idle["launch"] < 0.01 * idle["sync"]
    top = report.sync_sources[0]
    assert top.call == "hipMemcpyWithStream" and top.source  # its line in SGLang (with_stack)
