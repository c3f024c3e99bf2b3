"""`whatif --cuda-graphs` on tiny synthetic traces with hand-computed answers (DESIGN.md, "What if: CUDA
graphs"). Times in µs; G = one graph launch (GRAPH_LAUNCH_NS), F = the in-graph gap floor (GRAPH_GAP_NS).
"""

from __future__ import annotations

import json

import pytest

from tests.clirun import run_main
from tests.test_whatif import predict, replayer
from tests.tracebuilder import TraceBuilder
from tracekit.whatif.cudagraph import GRAPH_GAP_NS, GRAPH_LAUNCH_NS
from tracekit.whatif.predict import whatif
from tracekit.whatif.scenario import ScenarioError, WhatIfOptions

G = GRAPH_LAUNCH_NS / 1000
F = GRAPH_GAP_NS / 1000


def host_bound() -> TraceBuilder:
    # GIVEN  CPU  |- a [10,30) -|    |- b [40,60) -|    |- c [70,90) -|     step [0,100)
    #               launch [15,20)     launch [45,50)     launch [75,80)
    #        GPU            k1 [22,24)          k2 [52,56)          k3 [82,85)
    t = TraceBuilder()
    t.step(1, 0, 100)
    ops = (("aten::a", 10, 22, 2), ("aten::b", 40, 52, 4), ("aten::c", 70, 82, 3))
    for i, (name, s, k, d) in enumerate(ops):
        t.op(name, s, 20)
        t.launch(s + 5, 5, corr=i + 1)
        t.kernel(f"k{i + 1}", k, d, corr=i + 1)
    return t


def test_the_step_as_one_graph(tmp_path):
    rp = replayer(tmp_path, host_bound())
    assert predict(rp) == [100.0]
    # WHEN the step is one graph: the host's 100 µs become one graph launch [0,G); k1 starts 2 µs (its
    # observed launch lag) after it, k2 and k3 follow F after the kernel before
    # THEN the step ends with k3: G + 2 + 2 + F + 4 + F + 3
    (step,) = predict(rp, cuda_graphs=True)
    assert step == pytest.approx(G + 11 + 2 * F)


def test_a_region_named_by_op_is_its_own_graph(tmp_path):
    rp = replayer(tmp_path, host_bound())
    # WHEN only aten::b is a graph: its 20 µs of host time become G, the rest stays eager
    # THEN the host window (the longer side) is 100 - 20 + G
    (step,) = predict(rp, graph_region="^aten::b$")
    assert step == pytest.approx(100 - 20 + G)
    result, _ = whatif(rp.capture, WhatIfOptions(graph_region="^aten::b$"), replayer=rp, attribute=False)
    info = result.graph["cuda_graphs"]
    assert (info["regions"], info["kernels"], info["kernels_outside"]) == (1, 1, 2)
    assert any(n.startswith("CUDA graphs: 1 graph(s)") for n in result.notes)
    assert result.scenario["cuda_graphs"] is True and result.scenario["graph_region"] == "^aten::b$"


def test_nested_matches_are_one_region(tmp_path):
    # GIVEN a module annotation around a and b, and ops inside it that match the same pattern
    t = host_bound()
    t.annotation("nn.Module: Block_0", 5, 60)
    rp = replayer(tmp_path, t)
    # WHEN the module is the region: [5,65) is one graph (a, b and their launches), the rest eager
    (step,) = predict(rp, graph_region="Block|aten::a")
    assert step == pytest.approx(100 - 60 + G)


def test_backward_on_the_engine_thread_is_inside_the_step_graph(tmp_path):
    # GIVEN  step thread |- mm [0,10) -| ... in backward() ... |- add_ [65,75) -|   step [0,80)
    #        engine                     |- evaluate_function [20,60) -| (launches kb [30,35) → [40,50))
    t = TraceBuilder()
    t.step(1, 0, 80)
    t.op("aten::mm", 0, 10)
    t.launch(2, 3, corr=1)
    t.kernel("km", 6, 4, corr=1)
    t.op("autograd::engine::evaluate_function: MmBackward0", 20, 40, tid=200)
    t.launch(30, 5, corr=2, tid=200)
    t.kernel("kb", 40, 10, corr=2)
    t.op("aten::add_", 65, 10)
    rp = replayer(tmp_path, t)
    # WHEN the step is a graph: nothing on the host but the launch (G, the engine's work included);
    # km 1 µs after it (its lag) [G+1, G+5), kb F later for 10 µs
    (step,) = predict(rp, cuda_graphs=True)
    assert step == pytest.approx(G + 1 + 4 + F + 10)


def test_a_sync_in_the_region_is_kept_and_said(tmp_path):
    # GIVEN k [20,120) and a cudaDeviceSynchronize [20,125) waiting for it, in the step [0,200)
    t = TraceBuilder()
    t.step(1, 0, 200)
    t.launch(10, 5, corr=1)
    t.kernel("gemm", 20, 100, corr=1)
    t.sync(20, 105)
    rp = replayer(tmp_path, t)
    result, _ = whatif(rp.capture, WhatIfOptions(cuda_graphs=True), replayer=rp, attribute=False)
    # THEN the host waits for the kernel as before (the sync stays): G, k 5 µs later for 100, the sync
    # returns 5 µs after it; the rest of the host's time is gone
    assert result.devices[0].predicted_step_ms * 1000 == pytest.approx(G + 5 + 100 + 5)
    assert any("1 blocking call(s), kept" in n for n in result.notes)


def test_a_region_that_matches_nothing_is_one_line(tmp_path, capsys):
    rp = replayer(tmp_path, host_bound())
    with pytest.raises(ScenarioError, match=r"no host event \(op, annotation, module\) name matches 'nope'"):
        predict(rp, graph_region="nope")
    # an op that launches nothing is no region either
    t = host_bound()
    t.op("aten::view", 92, 2)
    (tmp_path / "b").mkdir()
    rp2 = replayer(tmp_path / "b", t)
    with pytest.raises(ScenarioError, match=r"1 host event\(s\) match 'view', but no device work"):
        predict(rp2, graph_region="view")
    with pytest.raises(ScenarioError, match="is not a regular expression"):
        WhatIfOptions(graph_region="(")
    path = host_bound().write(tmp_path / "c.pt.trace.json")
    code, out, err = run_main(["whatif", str(path), "--cuda-graphs-region", "nope"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cuda_graphs_through_the_cli(tmp_path, capsys):
    path = host_bound().write(tmp_path / "t.pt.trace.json")
    code, out, err = run_main(["whatif", str(path), "--cuda-graphs", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["scenario"]["cuda_graphs"] is True and doc["graph"]["cuda_graphs"]["regions"] == 1
    assert doc["devices"][0]["predicted_step_ms"] * 1000 == pytest.approx(G + 11 + 2 * F)


def test_a_dataloader_fetch_in_the_step_stays_and_the_prediction_says_lower_bound(tmp_path):
    # GIVEN a DataLoader fetch [0,60) in the step, then mm [60,70) launching k [66,86)
    t = TraceBuilder()
    t.step(1, 0, 100)
    t.dataloader(0, 60)
    t.op("aten::mm", 60, 10)
    t.launch(62, 2, corr=1)
    t.kernel("k", 66, 20, corr=1)
    rp = replayer(tmp_path, t)
    result, _ = whatif(rp.capture, WhatIfOptions(cuda_graphs=True), replayer=rp, attribute=False)
    # THEN the fetch keeps its 60 µs; the graph launch follows it, k 2 µs (its lag) after it for 20 µs
    assert result.devices[0].predicted_step_ms * 1000 == pytest.approx(60 + G + 2 + 20)
    assert result.graph["cuda_graphs"]["dataloader_fetches_kept"] == 1
    assert any("a lower bound" in n for n in result.notes)
