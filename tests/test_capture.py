"""Real CPU captures, end to end: the capture child, its traces and manifest, and the Parquet file."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracekit import api
from tracekit.errors import CaptureError, OutputExistsError
from tracekit.export.tensorboard import event_files
from tracekit.orchestrate.runner import child_env, plan_runs, run_capture

TRACE_NAME = re.compile(r"^rank(\d+)\.\d+\.pt\.trace\.json\.gz$")
TINY_MLP = {"batch_size": 4, "in_features": 16, "hidden": 32, "layers": 1, "out_features": 8}
QUICK = {"timing_warmup": 1, "timing_steps": 2}
MANIFEST_KEYS = {
    "workload", "knobs", "knobs_set", "schedule", "python", "torch", "device", "host", "started_at",
    "finished_at", "unprofiled_step_ms", "samples_per_step", "peak_memory_bytes", "ranks", "status",
    "world_size",
}  # fmt: skip


def _traces(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.endswith(".pt.trace.json.gz"))


def _step_names(trace: Path) -> list[str]:
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    return sorted(e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))


@pytest.mark.slow
def test_heavy_mlp_cpu_capture_writes_logdir_manifest_and_parquet(tmp_path, capfd):
    # GIVEN a tiny heavy_mlp on CPU with the default schedule (wait=1, warmup=1, active=3, repeat=2)
    # WHEN it is captured through the library API
    paths = api.capture("heavy_mlp", tmp_path, device="cpu", knobs={**TINY_MLP, **QUICK})
    # THEN OUT/heavy_mlp/py3.X/ holds one gzip trace per cycle, named <worker>.<time>.pt.trace.json.gz
    run = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    run_dir = tmp_path / "heavy_mlp" / run
    assert paths == [tmp_path / "heavy_mlp" / f"{run}.parquet"]
    names = _traces(run_dir)
    assert len(names) == 2 and all(TRACE_NAME.match(n) for n in names)
    # each cycle recorded its 3 active steps (steps are counted from the first profiled one)
    assert [_step_names(run_dir / n) for n in names] == [
        ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"],
        ["ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9"],
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert set(manifest) >= MANIFEST_KEYS
    assert manifest["status"] == "ok" and manifest["workload"] == "heavy_mlp"
    assert manifest["schedule"] == {"wait": 1, "warmup": 1, "active": 3, "repeat": 2, "skip_first": 0}
    assert manifest["knobs"]["hidden"] == 32 and manifest["knobs"]["amp"] is False  # every knob, resolved
    assert manifest["knobs_set"]["hidden"] == "32"
    assert manifest["extra"] == {"host_spin": {"target_us": 0.0, "iterations": 0}}  # CPU: no tf32 state
    assert event_files(run_dir)  # the TensorBoard scalars and report, from tracekit.api.analyze
    assert manifest["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert manifest["python"]["implementation"] and manifest["torch"]["version"]
    assert manifest["device"] == {"type": "cpu", "name": manifest["device"]["name"], "count": 1}
    assert manifest["host"]["cpu_count"] == os.cpu_count() and manifest["host"]["os"]
    assert len(manifest["unprofiled_step_ms"]) == 2 and all(t > 0 for t in manifest["unprofiled_step_ms"])
    assert manifest["samples_per_step"] == 4 and manifest["peak_memory_bytes"] is None
    assert manifest["ranks"][0]["traces"] == names
    assert manifest["ranks"][0]["steps_completed"] == 1 + 2 + 10
    profiled = manifest["ranks"][0]["profiled"]
    active = [n for n, ph in zip(profiled["profiler_step"], profiled["phases"]) if ph == "active"]
    assert active == [2, 3, 4, 7, 8, 9]  # the ProfilerStep#N numbers in the traces
    # progress lines name the interpreter and the step
    assert f"[{run}] heavy_mlp step 13/13 (profiled active)" in capfd.readouterr().err
    # AND the Parquet capture holds the events with the manifest in its metadata
    from tracekit.data.store import read_capture

    cap = read_capture(paths[0])
    assert cap.manifest == manifest
    assert cap.table.num_rows > 0


@pytest.mark.slow
def test_dataloader_train_cpu_capture_with_workers_through_the_cli(tmp_path):
    # GIVEN dataloader_train with two worker processes and an epoch shorter than the capture
    from typer.testing import CliRunner

    from tracekit.cli import get_app

    args = ["capture", "dataloader_train", "--device", "cpu", "-o", str(tmp_path), "--name", "w2"]
    args += ["--schedule", "wait=1,warmup=1,active=2,repeat=1"]
    for kv in ("dataset_size=64", "batch_size=8", "features=16", "hidden=16", "num_workers=2", "log_every=0"):
        args += ["--set", kv]
    args += ["--set", "host_spin_us=30"]
    for kv in QUICK.items():
        args += ["--set", "=".join(map(str, kv))]
    # WHEN it is captured with `tracekit capture`
    result = CliRunner().invoke(get_app(), args)
    # THEN the trace shows the multi-process DataLoader and the manifest its throughput figures
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "dataloader_train" / "w2"
    (name,) = _traces(run_dir)
    doc = json.loads(gzip.decompress((run_dir / name).read_bytes()))
    assert any("_MultiProcessingDataLoaderIter.__next__" in e.get("name", "") for e in doc["traceEvents"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["knobs"]["num_workers"] == 2 and manifest["knobs"]["pin_memory"] is False
    # the unprofiled warm-up lasts past the 4 batches the 2 workers make ahead: 4 + 2 timed + 4 profiled
    assert manifest["samples_per_step"] == 8 and manifest["ranks"][0]["steps_completed"] == 10
    # the spin's calibration is the workload's extra, top level and per rank (not a knob: repeats differ)
    spin = manifest["extra"]["host_spin"]
    assert (
        spin["target_us"] == 30.0
        and spin["iterations"] > 0
        and manifest["ranks"][0]["extra"]["host_spin"] == spin
    )
    assert str(tmp_path / "dataloader_train" / "w2.parquet") in result.output


def test_existing_outputs_are_not_overwritten_without_force(tmp_path):
    (tmp_path / "heavy_mlp").mkdir()
    (tmp_path / "heavy_mlp" / "mine.parquet").write_bytes(b"keep me")
    with pytest.raises(OutputExistsError, match=r"mine\.parquet exists; pass --force"):
        plan_runs("heavy_mlp", tmp_path, [None], "mine", force=False)
    assert plan_runs("heavy_mlp", tmp_path, [None], "mine", force=True)[0].name == "mine"
    assert (tmp_path / "heavy_mlp" / "mine.parquet").read_bytes() == b"keep me"  # nothing ran yet


def test_bad_knob_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(CaptureError, match=r"heavy_mlp has no knob num_wokers; its knobs are .*batch_size"):
        run_capture("heavy_mlp", tmp_path, device="cpu", knobs={"num_wokers": 0})
    with pytest.raises(CaptureError, match=r"--set amp=maybe: expected true or false"):
        run_capture("heavy_mlp", tmp_path, device="cpu", knobs={"amp": "maybe"})
    with pytest.raises(CaptureError, match=r"unknown workload 'resnet'"):
        run_capture("resnet", tmp_path, device="cpu")
    assert not any(tmp_path.iterdir())


SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from tracekit.capture import session, steps

    out, fail_at, sig_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    model = torch.nn.Linear(8, 4)
    seen = 0
    for i in steps(range(100), samples_per_step=16):
        if i == fail_at:
            raise ValueError(f"boom at {i}")
        if i == sig_at:
            import os, signal
            os.killpg(os.getpgrp(), signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        model(torch.randn(16, 8)).sum().backward()
        seen += 1
    with session() as s:  # a second session in the same run is a no-op
        s.step()
    open(out, "w").write(str(seen))
    """
)


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_script_api_is_a_no_op_without_tracekit():
    # outside `python -m tracekit.capture --script` nothing is pending: the API changes nothing
    from tracekit.capture import NullSession, session, steps

    assert list(steps(range(100))) == list(range(100))
    with session(samples_per_step=8) as s:
        assert isinstance(s, NullSession) and s.done is False and s.knobs == {}
        s.step()


@pytest.mark.slow
def test_script_capture_marks_steps_and_stops_when_the_schedule_is_done(tmp_path):
    script = _script(tmp_path)
    seen = tmp_path / "seen.txt"
    sched = "wait=1,warmup=1,active=2,repeat=1"
    paths = run_capture(
        None, tmp_path / "out", device="cpu", knobs=QUICK, schedule=sched, script=script,
        script_args=[str(seen), "-1", "-1"],
    )  # fmt: skip
    assert seen.read_text() == str(1 + 2 + 4)  # timing steps, then wait+warmup+active
    run_dir = tmp_path / "out" / "train" / f"py{sys.version_info[0]}.{sys.version_info[1]}"
    (name,) = _traces(run_dir)
    assert _step_names(run_dir / name) == ["ProfilerStep#2", "ProfilerStep#3"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["workload"] == "train" and manifest["samples_per_step"] == 16
    assert manifest["script"]["args"] == [str(seen), "-1", "-1"]
    assert paths[0].exists()


@pytest.mark.slow
def test_a_crashing_script_keeps_its_traces_and_shows_its_error(tmp_path, capfd):
    # GIVEN a script that raises in the first active step of the second profiler cycle
    script = _script(tmp_path)
    sched = "wait=1,warmup=1,active=2,repeat=2"  # timing steps 0-2; cycles over 3-6 and 7-10
    # WHEN it is captured
    with pytest.raises(CaptureError, match=r"ValueError: boom at 9 .*traces written so far are kept"):
        run_capture(
            None, tmp_path / "out", device="cpu", knobs=QUICK, schedule=sched, script=script,
            script_args=[str(tmp_path / "seen"), "9", "-1"], name="crash",
        )  # fmt: skip
    # THEN the traceback is shown, the full first cycle and the partial second one are on disk
    assert 'raise ValueError(f"boom at {i}")' in capfd.readouterr().err
    run_dir = tmp_path / "out" / "train" / "crash"
    names = _traces(run_dir)
    assert [_step_names(run_dir / n) for n in names] == [
        ["ProfilerStep#2", "ProfilerStep#3"],
        ["ProfilerStep#6"],
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "crashed" and "ValueError: boom at 9" in manifest["error"]
    assert not (tmp_path / "out" / "train" / "crash.parquet").exists()


@pytest.mark.slow
def test_ctrl_c_stops_the_capture_cleanly_and_keeps_what_was_written(tmp_path):
    # GIVEN `tracekit capture --script` in its own process group, and a Ctrl-C at step 9
    script = _script(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tracekit", "capture", "--script", str(script), "-o", str(out)]
    cmd += ["--device", "cpu", "--schedule", "wait=1,warmup=1,active=2,repeat=2", "--name", "ctrlc"]
    cmd += ["--set", "timing_warmup=1", "--set", "timing_steps=2", "--", str(tmp_path / "seen"), "-1", "8"]
    # WHEN it runs
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, start_new_session=True)
    # THEN both processes stop cleanly: exit 130, the first cycle's trace and the manifest kept, no Parquet
    assert proc.returncode == 130, proc.stderr
    assert "tracekit.capture: interrupted at step 9" in proc.stderr and "Traceback" not in proc.stderr
    assert "tracekit: interrupted" in proc.stderr
    run_dir = out / "train" / "ctrlc"
    assert len(_traces(run_dir)) == 1
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    assert not (out / "train" / "ctrlc.parquet").exists()


@pytest.mark.slow
def test_cpu_ddp_capture_writes_one_trace_per_rank(tmp_path):
    # GIVEN heavy_mlp under DDP with 2 gloo processes, rank 1 slowed down
    knobs = {**TINY_MLP, **QUICK, "nproc": 2, "slow_rank": 1, "slow_ms": 5}
    # WHEN captured
    paths = run_capture(
        "heavy_mlp", tmp_path, device="cpu", knobs=knobs, schedule="wait=1,warmup=1,active=2,repeat=1",
        name="ddp",
    )  # fmt: skip
    # THEN each rank wrote its trace, and the merged manifest lists both ranks
    run_dir = tmp_path / "heavy_mlp" / "ddp"
    names = _traces(run_dir)
    assert sorted(int(TRACE_NAME.match(n).group(1)) for n in names) == [0, 1]
    for n in names:
        doc = json.loads(gzip.decompress((run_dir / n).read_bytes()))
        assert doc["distributedInfo"]["world_size"] == 2
        assert any(e.get("name") == "gloo:all_reduce" for e in doc["traceEvents"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and [r["rank"] for r in manifest["ranks"]] == [0, 1]
    assert manifest["global_samples_per_step"] == 8
    assert not list(run_dir.glob(".manifest.rank*"))
    from tracekit.data.store import read_capture

    ranks = set(read_capture(paths[0]).table.column("rank").to_pylist())
    assert ranks == {0, 1}


@pytest.mark.slow
def test_a_users_torchrun_script_gets_its_own_arguments_on_every_rank(tmp_path):
    # GIVEN a script that makes its own gloo process group and takes its model width from its argv
    script = tmp_path / "train_ddp.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist\n"
        "from tracekit.capture import steps\n"
        "dist.init_process_group('gloo')\n"
        "width = int(sys.argv[1])\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(width, width))\n"
        "x = torch.randn(4, width)\n"
        "for _ in steps(range(int(sys.argv[2])), samples_per_step=4):\n"
        "    model(x).sum().backward()\n"
        "dist.destroy_process_group()\n"
    )
    # WHEN captured under 2 ranks with its arguments after `--` (a loop of 1000 steps: the capture
    # ends it; without its arguments it would not run at all)
    paths = run_capture(
        None, tmp_path / "out", device="cpu", knobs={**QUICK, "nproc": 2},
        schedule="wait=1,warmup=1,active=2,repeat=1", script=script, script_args=("24", "1000"),
    )  # fmt: skip
    # THEN every rank ran it with them, and the capture is complete
    manifest = json.loads((tmp_path / "out" / "train_ddp" / paths[0].stem / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    from tracekit.data.store import read_capture

    names = set(read_capture(paths[0]).table.column("name").to_pylist())
    assert "gloo:all_reduce" in names


def test_a_regular_install_puts_only_tracekit_and_workloads_on_the_childs_path(tmp_path, monkeypatch):
    from tracekit.orchestrate import runner
    from tracekit.orchestrate.runner import capture_env

    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for pkg in ("tracekit", "workloads", "numpy"):
        (site / pkg).mkdir(parents=True)
    monkeypatch.setattr(runner, "PACKAGE_ROOT", site)
    with capture_env() as env:
        first = Path(env["PYTHONPATH"].split(os.pathsep)[0])
        assert first != site and sorted(p.name for p in first.iterdir()) == ["tracekit", "workloads"]
        assert (first / "workloads").resolve() == site / "workloads"
    assert not first.exists()
