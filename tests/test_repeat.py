"""`tracekit capture --repeat N`: interleaved runs, their names, the calibration and build provenance in
every manifest, and the failures (a bad count, an interpreter without a working torch, one that dies
half-way: one line each, finished runs kept)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.capture.calibrate import CONTROLS, MEASURES, calibrate
from tracekit.capture.environment import _flag, python_build
from tracekit.errors import CaptureError
from tracekit.orchestrate.runner import interleaved, plan_runs, run_capture

TINY = {"n_ops": 5, "size": 4, "timing_warmup": 1, "timing_steps": 1}
SHORT = "wait=0,warmup=1,active=1,repeat=1"
HERE = f"py{sys.version_info[0]}.{sys.version_info[1]}"


# -- the order --------------------------------------------------------------------------------------------


def test_rounds_alternate_forward_and_backward():
    # GIVEN two interpreters A=0, B=1 and four rounds  THEN A B | B A | A B | B A
    assert [i for i, _ in interleaved(2, 4)] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert [r for _, r in interleaved(2, 4)] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert interleaved(3, 1) == [(0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("repeat", [2, 4, 6])
def test_an_even_number_of_rounds_cancels_a_linear_drift(k, repeat):
    # GIVEN a machine that slows down linearly with the run's position
    # THEN every interpreter's mean position, hence its mean drift, is the same
    order = interleaved(k, repeat)
    mean_position = {i: sum(p for p, (j, _) in enumerate(order) if j == i) / repeat for i in range(k)}
    assert len(set(mean_position.values())) == 1
    assert sorted(r for j, r in order if j == 0) == list(range(1, repeat + 1))


def test_repeated_runs_are_named_by_interpreter_and_number(tmp_path):
    runs = plan_runs("tiny_ops", tmp_path, [None], None, force=False, repeat=3)
    assert [r.name for r in runs] == [f"{HERE}-1", f"{HERE}-2", f"{HERE}-3"]
    assert runs[1].parquet == tmp_path / "tiny_ops" / f"{HERE}-2.parquet"
    assert [r.name for r in plan_runs("tiny_ops", tmp_path, [None], "base", False, 2)] == ["base-1", "base-2"]
    assert [r.name for r in plan_runs("tiny_ops", tmp_path, [None], None, False, 1)] == [HERE]


@pytest.mark.parametrize("repeat", [0, -2])
def test_a_repeat_below_one_is_refused(tmp_path, repeat):
    with pytest.raises(CaptureError, match=rf"--repeat {repeat}: give how many runs per interpreter"):
        plan_runs("tiny_ops", tmp_path, [None], None, force=False, repeat=repeat)


def test_cli_repeat_zero_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "capture", "tiny_ops", "--repeat", "0", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "tracekit: error: --repeat 0: give how many runs per interpreter, 1 or more"
    ]


# -- calibration and provenance -----------------------------------------------------------------------------


def test_calibration_measures_every_figure_positive():
    doc = calibrate("cpu")
    assert set(doc["figures"]) == set(MEASURES) - {"cuda_launch", "cuda_kernel"}
    for name, fig in doc["figures"].items():
        assert 0 < fig["min_ns"] <= fig["ns"], name
        assert fig["n"] >= 1
    assert set(CONTROLS) <= set(MEASURES)
    # a torch op called from Python costs more than the bare call of a C builtin of the same shape
    assert doc["figures"]["torch_call"]["min_ns"] > doc["figures"]["builtin_call"]["min_ns"]


def test_build_flags_read_from_configure_and_compiler_flags():
    assert _flag("'--enable-optimizations' '--with-lto'", "", "--with-lto", "-flto", False) is True
    assert _flag("'--prefix=/x'", "-O3 -flto=auto", "--with-lto", "-flto", False) is True
    assert _flag("'--prefix=/x' '--enable-shared'", "-O3", "--with-lto", "-flto", False) is False
    # a distribution's build (its packaging may optimise without configure flags): cannot tell
    assert _flag("'--prefix=/usr'", "-O2", "--enable-optimizations", "-fprofile-use", True) is None
    assert _flag("", "", "--enable-optimizations", "-fprofile-use", False) is None
    b = python_build()
    assert set(b) >= {"pgo", "lto", "shared_libpython", "compiler", "free_threaded", "distribution"}
    assert isinstance(b["shared_libpython"], bool) and b["compiler"]


# -- real repeated captures ---------------------------------------------------------------------------------


def _wrapper(tmp_path: Path, name: str, body: str) -> Path:
    """An interpreter wrapper script: runs this Python unless `body` (shell) says otherwise."""
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\n{body}\nexec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.slow
def test_repeated_capture_writes_interleaved_runs_with_calibration(tmp_path, capfd):
    # GIVEN one interpreter, two rounds, --no-parse  WHEN captured
    dirs = run_capture("tiny_ops", tmp_path, device="cpu", knobs=TINY, schedule=SHORT, repeat=2, parse=False)
    # THEN two run folders (no Parquet), named by round, each with a manifest holding the calibration
    assert dirs == [tmp_path / "tiny_ops" / f"{HERE}-1", tmp_path / "tiny_ops" / f"{HERE}-2"]
    assert not list((tmp_path / "tiny_ops").glob("*.parquet"))
    err = capfd.readouterr().err
    assert f"2 runs, interleaved: {HERE}-1 {HERE}-2" in err
    assert "too few for a bounded 95% interval" in err and "needs at least 4 of each" in err
    for d in dirs:
        m = json.loads((d / "manifest.json").read_text())
        assert m["run"] == d.name
        for when in ("before", "after"):
            figures = m["calibration"][when]["figures"]
            assert figures["python_loop"]["ns"] > 0 and figures["aten_cpu"]["ns"] > 0
        assert m["python"]["build"]["shared_libpython"] in (True, False)
    # AND `tracekit diff --by python` finds them (one Python: nothing to compare, said in one line)
    from tracekit.compare.group import find_runs, group_runs

    runs = find_runs(tmp_path / "tiny_ops")
    assert [Path(p).name for p, _ in runs] == [f"{HERE}-1", f"{HERE}-2"]
    assert [(v, len(p)) for v, p in group_runs(runs, "python")] == [(runs[0][1]["python"]["version"], 2)]


@pytest.mark.slow
def test_an_interpreter_dying_half_way_keeps_the_finished_runs(tmp_path):
    # GIVEN an interpreter whose second capture fails (its first one and torch's import work)
    count = tmp_path / "count"
    body = (
        f'case "$*" in *tracekit.capture*) n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count};'
        ' [ "$n" -ge 1 ] && { echo "boom" >&2; exit 1; };; esac'
    )
    py = _wrapper(tmp_path, "python3", body)
    out = tmp_path / "out"
    # WHEN captured twice  THEN one line names the failed run and the kept one
    with pytest.raises(CaptureError) as exc:
        run_capture("tiny_ops", out, pythons=[str(py)], device="cpu", knobs=TINY, schedule=SHORT, repeat=2)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{HERE}-2: capture under CPython")
    assert msg.endswith(f"the 1 finished runs are kept ({HERE}-1)")
    assert (out / "tiny_ops" / f"{HERE}-1.parquet").is_file()


def test_an_interpreter_that_cannot_import_torch_stops_rounds_before_the_first(tmp_path):
    # GIVEN an interpreter where torch is installed but its import fails
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('libtorch_python.so: cannot open')\n")
    py = _wrapper(tmp_path, "python3", f"export PYTHONPATH={fake}:$PYTHONPATH")
    # WHEN several rounds are asked for  THEN nothing runs and one line says why
    with pytest.raises(CaptureError, match=r"cannot import torch \(ImportError: libtorch_python\.so"):
        run_capture("tiny_ops", tmp_path / "out", pythons=[str(py)], device="cpu", knobs=TINY, repeat=2)
    assert not (tmp_path / "out" / "tiny_ops").exists()
