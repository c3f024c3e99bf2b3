"""Real H200 traces (fixtures/h200_probe, see its README): each has a known dominant idle cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.analysis import analyze, check_invariants
from tracekit.model import CAUSES, Report
from tracekit.parse import parse_paths

FIXTURES = Path(__file__).parent.parent / "fixtures" / "h200_probe"


def load(name: str) -> Report:
    capture = parse_paths([FIXTURES / f"{name}.pt.trace.json.gz"])
    report = analyze(capture)
    check_invariants(report, capture)
    return report


def shares(report: Report) -> dict[str, float]:
    (dev,) = report.devices
    total = sum(s.dur_ns for s in dev.samples)
    return {c: sum(s.idle_ns[c] for s in dev.samples) / total for c in CAUSES}


def test_mlp_is_compute_bound():
    r = load("mlp")
    (dev,) = r.devices
    assert dev.steps == 3
    assert dev.gpu_utilization > 0.95  # idle a few % at most
    assert sum(shares(r).values()) < 0.05
    assert r.advice == ()


def test_sync_is_dominated_by_item_sync():
    r = load("sync")
    s = shares(r)
    assert max(s, key=s.get) == "sync" and s["sync"] > 0.4
    top = r.sync_sources[0]
    # 16 .item() per step x 3 steps; the user line is the probe's loop (its file was run as explore.py)
    assert (top.op, top.call) == ("aten::item", "cudaStreamSynchronize")
    assert top.source is not None and top.source.endswith(".py:28")
    assert top.gaps >= 48
    assert [a.kind for a in r.advice] == ["sync_drain"]


def test_tiny_ops_are_host_bound():
    r = load("tiny")
    s = shares(r)
    host = s["launch"] + s["framework"] + s["interpreter"]
    assert host > 0.9 and s["sync"] == 0 and s["dataloader"] == 0
    assert max(s, key=s.get) in ("launch", "framework", "interpreter")
    # 300 iterations x 2 ops per step: ~600 host dispatch gaps per step
    assert all(h.dispatch_gaps >= 590 for h in r.host.steps)
    assert "cuda_graphs" in [a.kind for a in r.advice]


def test_dataloader_dominates():
    r = load("dataloader")
    s = shares(r)
    assert max(s, key=s.get) == "dataloader" and s["dataloader"] > 0.8
    assert r.dataloader.iterator == "_SingleProcessDataLoaderIter" and r.dataloader.multi_worker is False
    assert r.advice[0].kind == "dataloader_workers"


@pytest.mark.parametrize("name", ["mlp", "sync", "tiny", "dataloader"])
def test_kernel_stats_cover_every_kernel_in_steps(name):
    r = load(name)
    (dev,) = r.devices
    # every busy ns is some kernel's; kernel time sums to at least busy (streams may overlap)
    kernel_ns = sum(k.kernel.total_ns for k in r.kernel_stats)
    assert kernel_ns >= sum(s.busy_ns for s in dev.samples) * 0.99


HTA = Path(__file__).parent.parent / "fixtures" / "hta"


def test_two_rank_trace_names_the_peer_it_waited_for():
    # HTA's sampled 2-rank training traces: NCCL collectives on both ranks
    r = analyze(parse_paths([HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]))
    check_invariants(r)
    by_rank = {d.rank: d for d in r.devices}
    assert set(by_rank) == {0, 1}
    for rank, d in by_rank.items():
        assert d.collective_wait_ms_per_step > 1.0
        assert d.straggler_rank == 1 - rank


@pytest.mark.parametrize("path", sorted(HTA.glob("*.json.gz")), ids=lambda p: p.name.split(".")[0])
def test_hta_sample_traces_keep_the_invariants(path):
    r = analyze(parse_paths([path]))
    check_invariants(r)
    assert r.devices or r.host.steps
