"""The what-if pairs in docs/results/whatif/: the captures hold what the script set, and the committed table
(pairs.json, summary.md) is what docs/results/whatif_pairs.py derives from them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tracekit.data.store import read_meta

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "whatif"


def _pairs_module():
    spec = importlib.util.spec_from_file_location(
        "whatif_pairs", ROOT / "docs" / "results" / "whatif_pairs.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _manifest(run: str) -> dict:
    return read_meta(RESULTS / f"{run}.parquet")["manifest"]


def test_every_capture_ran_its_configuration_with_the_planned_steps():
    table = json.loads((RESULTS / "pairs.json").read_text())
    runs = sorted(table["captures"])
    assert sorted(p.stem for p in RESULTS.glob("*.parquet")) == runs
    for run in runs:
        m = _manifest(run)
        knobs, extra, config = m["knobs"], m["extra"], run.rsplit("-", 1)[0]
        assert m["status"] == "ok" and m["device"]["name"] == "NVIDIA H200", run
        assert len(m["unprofiled_step_ms"]) == 30 and m["ranks"][0]["unprofiled"]["clock"] == "cuda_event"
        assert m["ranks"][0]["profiled"]["phases"].count("active") == 8
        assert knobs.get("sync_every_layer", False) is ("sync" in config), run
        assert knobs["with_stack"] is config.endswith("stack"), run
        assert extra["tf32"]["matmul_allow_tf32"] is ("tf32" in config) is knobs["tf32"], run
        spinning = "spin50" in config
        assert (knobs["host_spin_us"], extra["host_spin"]["iterations"] > 0) == (
            50.0 if spinning else 0.0,
            spinning,
        )
        if config.startswith("dl_"):
            assert knobs["sample_sleep_ms"] == (0.5 if config == "dl_slow" else 0.0)
            assert (knobs["num_workers"], knobs["batch_size"]) == (0, 32)
        elif config.startswith("mlp"):
            assert (knobs["hidden"], knobs["layers"], knobs["batch_size"]) == (512, 16, 64)
        else:
            assert (knobs["hidden"], knobs["layers"], knobs["batch_size"]) == (4096, 8, 256)


@pytest.mark.slow
def test_the_committed_table_is_what_the_captures_give():
    # two pairs of round 1 re-measured (tracekit analyze on each capture), against the committed figures
    mod = _pairs_module()
    table = json.loads((RESULTS / "pairs.json").read_text())
    runs = {
        r: mod.measure(RESULTS / f"{r}.parquet") for r in ("mlp_sync-1", "mlp-1", "heavy-1", "heavy_tf32-1")
    }
    steps = ("unprofiled_step_ms_median", "profiled_step_ms_mean", "profiled_device_inclusive_step_ms")
    for run, fresh in runs.items():
        assert [fresh[k] for k in steps] == pytest.approx([table["captures"][run][k] for k in steps]), run
    derived = {p["pair"]: p["rounds"] for p in mod.pairs(runs)}
    committed = {p["pair"]: p["rounds"] for p in table["pairs"]}
    for pair in ("sync", "tf32"):
        (fresh,) = derived[pair]
        (kept,) = [r for r in committed[pair] if r["round"] == 1]
        assert fresh == pytest.approx(kept)
    assert mod.markdown(table["captures"], table["pairs"]) == (RESULTS / "summary.md").read_text()
