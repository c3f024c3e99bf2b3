"""The CLI fuzz harness (benchmarks/fuzz_cli.py), bounded for CI: random mutations of real traces and
captures, random option values, the hostile classes (links, devices, FIFOs, run names with '..', names
with commas, pooled duplicates, mixed runs, corrupted durations, B/E events), and parses stopped by a
signal at a random time, with a fixed seed. Each case must keep the three promises (no traceback, no
wrong number without a warning, no partial output), and a hostile one what its class requires.
The long run is by hand: `python benchmarks/fuzz_cli.py --cases 500` (docs/QUIRKS.md records it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _harness():
    spec = importlib.util.spec_from_file_location("fuzz_cli", ROOT / "benchmarks/fuzz_cli.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_cli", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_mutated_inputs_and_options_keep_the_promises(tmp_path):
    findings = _harness().fuzz(cases=30, seed=21, root=tmp_path)
    assert not findings, "\n".join(map(str, findings))


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_parses_stopped_at_random_times_keep_the_promises(tmp_path):
    findings = _harness().fuzz(cases=0, seed=21, signals=3, root=tmp_path)
    assert not findings, "\n".join(map(str, findings))
