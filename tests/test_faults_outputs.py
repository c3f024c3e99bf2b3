"""The fault table of docs/QUIRKS.md, outputs (issue #41): tracekit never deletes what it did not
create; --force replaces only the one file or folder it names, writing through a link to its target and
never over a device, FIFO or socket; nothing that exists is written without --force (a capture that
`analyze --store` would rewrite included); a command's outputs are distinct; a failed command leaves no
folder it made."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.test_faults_user import one_line_error, small_trace
from tracekit import api
from tracekit.errors import CaptureError, OutputExistsError
from tracekit.orchestrate.runner import plan_runs

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures/h200_probe/tiny.pt.trace.json.gz"
TINY_MLP = {"batch_size": 4, "in_features": 16, "hidden": 32, "layers": 1, "out_features": 8}
QUICK = {"timing_warmup": 1, "timing_steps": 1}
ONE_CYCLE = "wait=0,warmup=1,active=1,repeat=1"


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "cap.parquet"
    cmd = [sys.executable, "-m", "tracekit", "parse", str(TINY), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return out


# --- capture: a run name is one path component; --force replaces only the run's own files -----------


@pytest.mark.parametrize("name", ["..", ".", "../../escaped", "a/b", "", ".hidden"])
def test_a_run_name_that_is_not_one_path_component_is_refused(tmp_path, capsys, name):
    """`--name .. --force` deleted everything in OUT (other workloads' captures, the user's files) and
    ended in a FileNotFoundError; `--name .` deleted a sibling run; `--name ../../escaped` wrote outside
    OUT. Refused before anything runs, nothing made."""
    out = tmp_path / "runs"
    (out / "other").mkdir(parents=True)
    (out / "mine.txt").write_text("keep")
    before = _tree(tmp_path)
    argv = ["capture", "heavy_mlp", "--device", "cpu", "-o", str(out), "--name", name, "--force"]
    one_line_error(*run_main(argv, capsys)[::2], "a run name is one file name")
    assert _tree(tmp_path) == before
    with pytest.raises(CaptureError, match="a run name is one file name"):
        plan_runs("heavy_mlp", out, [None], name, force=True)


def test_a_run_folder_that_is_a_file_is_refused_even_with_force(tmp_path):
    (tmp_path / "heavy_mlp").mkdir()
    (tmp_path / "heavy_mlp" / "mine").write_text("keep")
    with pytest.raises(OutputExistsError, match="exists and is not a folder"):
        plan_runs("heavy_mlp", tmp_path, [None], "mine", force=True)
    assert (tmp_path / "heavy_mlp" / "mine").read_text() == "keep"


@pytest.mark.parametrize(
    "argv",
    [
        ["--repeat", "0"],
        ["--python", "/bin/false"],
        ["--set", "no_such_knob=1"],
    ],
)
def test_a_refused_capture_makes_no_folder(tmp_path, capsys, argv):
    """`--repeat 0`, `--python /bin/false` used to leave the (empty) output folder behind."""
    out = tmp_path / "new1" / "new2"
    code, _, err = run_main(["capture", "heavy_mlp", "--device", "cpu", "-o", str(out), *argv], capsys)
    assert code == 2, err
    assert not (tmp_path / "new1").exists()


@pytest.mark.slow
def test_a_capture_that_fails_in_its_child_removes_only_the_folders_it_made(tmp_path, capsys):
    """`--device cuda` without a GPU fails in the capture child, after the run folder was made: the
    folders made for it go again, a folder that was there stays."""
    (tmp_path / "kept").mkdir()
    for out in (tmp_path / "new1" / "new2", tmp_path / "kept"):
        code, _, err = run_main(["capture", "heavy_mlp", "--device", "cuda", "-o", str(out)], capsys)
        if code == 0:
            pytest.skip("this machine has a CUDA device")
        assert code == 2 and "sees no CUDA device" in err, err
    assert _tree(tmp_path) == ["kept"]


@pytest.mark.slow
def test_force_replaces_a_runs_traces_and_keeps_everything_else(tmp_path):
    """--force used to `rmtree` the run folder: a user's file there was lost. Now only what tracekit
    wrote (traces, manifest, its TensorBoard event files) is replaced."""
    kwargs = dict(device="cpu", knobs={**TINY_MLP, **QUICK}, schedule=ONE_CYCLE, name="r")
    api.capture("heavy_mlp", tmp_path, **kwargs)
    run_dir = tmp_path / "heavy_mlp" / "r"
    (run_dir / "notes.txt").write_text("mine")
    (tmp_path / "heavy_mlp" / "sibling").mkdir()
    first = sorted(p.name for p in run_dir.glob("*.pt.trace.json.gz"))
    with pytest.raises(OutputExistsError, match="pass --force"):
        api.capture("heavy_mlp", tmp_path, **kwargs)
    api.capture("heavy_mlp", tmp_path, force=True, **kwargs)
    second = sorted(p.name for p in run_dir.glob("*.pt.trace.json.gz"))
    assert len(second) == 1 and second != first  # the old trace replaced, not kept beside the new
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert (tmp_path / "heavy_mlp" / "sibling").is_dir()
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1


# --- the output path: links, devices, FIFOs, and two outputs in one --------------------------------


def test_force_writes_through_a_link_to_its_target(tmp_path, capture, capsys):
    """`-o LINK --force` replaced the link with a regular file (its target went stale)."""
    target = tmp_path / "report.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    one_line_error(*run_main(["analyze", str(capture), "-o", str(link)], capsys)[::2], "pass --force")
    code, _, err = run_main(["analyze", str(capture), "--no-savings", "-o", str(link), "--force"], capsys)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "where the step time went" in target.read_text()
    assert _tree(tmp_path) == ["link.txt", "report.txt"]


def test_a_dangling_link_is_written_through(tmp_path, capture, capsys):
    """-o onto a dangling link said the file 'appeared while tracekit was writing it'."""
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "new.json")
    code, _, err = run_main(["analyze", str(capture), "--no-savings", "-o", str(link)], capsys)
    assert code == 0, err
    assert link.is_symlink() and (tmp_path / "new.json").read_text().startswith("{")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_device_or_fifo_is_never_an_output(tmp_path, capture, capsys):
    """`-o FIFO --force` replaced the FIFO with a file (as root `-o /dev/null --force` would replace
    the system's /dev/null): refused whatever --force says, the node untouched."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "to-null"
    link.symlink_to("/dev/null")
    for out, what in ((fifo, "a FIFO"), (Path("/dev/null"), "a character device"), (link, "character")):
        for extra in ([], ["--force"]):
            argv = ["analyze", str(capture), "-o", str(out), *extra]
            one_line_error(*run_main(argv, capsys)[::2], what, "name a regular file")
        argv = ["parse", str(TINY), "-o", str(out), "--force"]
        one_line_error(*run_main(argv, capsys)[::2], what)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_diff_refuses_one_file_for_the_report_and_the_plot(tmp_path, capture, capsys):
    """`diff A B --plot same.png -o same.png` wrote the file twice without --force: the report lost."""
    pytest.importorskip("matplotlib")
    same = tmp_path / "same.png"
    for extra in ([], ["--force"]):
        argv = ["diff", str(capture), str(capture), "--plot", str(same), "-o", str(same), *extra]
        one_line_error(*run_main(argv, capsys)[::2], "named for two outputs")
    assert not same.exists()


def test_diff_plot_is_not_overwritten_without_force(tmp_path, capture, capsys):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "p.png"
    plot.write_bytes(b"mine")
    argv = ["diff", str(capture), str(capture), "--plot", str(plot)]
    one_line_error(*run_main(argv, capsys)[::2], "exists; pass --force")
    assert plot.read_bytes() == b"mine"


# --- analyze --store rewrites the capture: only with the user's consent where it is protected ---------


def test_store_refuses_a_read_only_capture_without_force(tmp_path, capture, capsys):
    """`analyze X --store` replaced a capture the user had made read-only (chmod 444)."""
    cap = tmp_path / "c.parquet"
    cap.write_bytes(capture.read_bytes())
    cap.chmod(0o444)
    before = cap.read_bytes()
    one_line_error(*run_main(["analyze", str(cap), "--store"], capsys)[::2], "is read-only", "--force")
    assert cap.read_bytes() == before and stat.S_IMODE(cap.stat().st_mode) == 0o444
    code, _, err = run_main(["analyze", str(cap), "--store", "--force", "--no-savings"], capsys)
    assert code == 0, err
    assert cap.read_bytes() != before and stat.S_IMODE(cap.stat().st_mode) == 0o444  # its mode kept


def test_store_refuses_another_users_capture_without_force(tmp_path, capture, capsys, monkeypatch):
    """In a shared folder another user's capture was replaced, its owner changed to ours."""
    cap = tmp_path / "c.parquet"
    cap.write_bytes(capture.read_bytes())
    monkeypatch.setattr(os, "geteuid", lambda: cap.stat().st_uid + 1)
    one_line_error(*run_main(["analyze", str(cap), "--store"], capsys)[::2], "belongs to another user")


def test_store_into_a_read_only_capture_folder_needs_force(tmp_path, capsys):
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    folder = tmp_path / "c"
    assert run_main(["parse", str(trace), "-o", f"{folder}/"], capsys)[0] == 0
    meta = folder / "_tracekit.json"
    meta.chmod(0o444)
    before = meta.read_bytes()
    one_line_error(*run_main(["analyze", str(folder), "--store"], capsys)[::2], "is read-only")
    assert meta.read_bytes() == before and not list(folder.glob("rank=*/idle-0.parquet"))


# --- a failed write leaves no folder it made ----------------------------------------------------------


def test_a_failed_parse_leaves_no_folder_it_made(tmp_path, capsys):
    """`parse BAD -o new1/new2/x.parquet` left new1/new2 behind."""
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    worse = tmp_path / "worse.pt.trace.json"
    worse.write_text("garbage")
    for inputs, out in (
        ([bad], "new1/new2/x.parquet"),
        ([bad], "new3/new4/"),
        ([bad, worse], "new5/new6/x.parquet"),  # a job of files: parsed into a stage beside the output
        ([bad, worse], "new7/new8/"),
    ):
        code, _, err = run_main(["parse", *map(str, inputs), "-o", str(tmp_path / out)], capsys)
        assert code == 2, err
    assert _tree(tmp_path) == ["bad.pt.trace.json", "worse.pt.trace.json"]


# --- Ctrl-C sent to tracekit alone stops the capture promptly, its traces kept ------------------------

SLOW_SCRIPT = """
import time
import torch
from tracekit.capture import steps

model = torch.nn.Linear(8, 4)
for i in steps(range(100000), samples_per_step=16):
    model(torch.randn(16, 8)).sum().backward()
    time.sleep(0.02)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_stop_sent_to_tracekit_alone_stops_the_capture_and_keeps_its_traces(tmp_path, sig):
    """Ctrl-C sent to `tracekit capture` alone (not to its process group) was held until the workload
    ended; now it is passed on to the capture child, which closes the profiler at once."""
    import signal
    import time

    from tracekit.orchestrate.runner import child_env

    script = tmp_path / "train.py"
    script.write_text(SLOW_SCRIPT)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tracekit", "capture", "--script", str(script), "-o", str(out)]
    cmd += ["--device", "cpu", "--schedule", "wait=0,warmup=1,active=100000,repeat=1", "--name", "stop"]
    cmd += ["--set", "timing_warmup=1", "--set", "timing_steps=1"]
    proc = subprocess.Popen(cmd, env=child_env(), stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "step 6/" in line:  # a few active steps recorded
            break
    sent = time.monotonic()
    proc.send_signal(getattr(signal, sig))
    err = "".join(seen) + proc.stderr.read()
    rc = proc.wait(timeout=60)
    assert time.monotonic() - sent < 30, err  # not the 100,000 steps' time
    assert rc == 128 + getattr(signal, sig), err
    assert "Traceback" not in err
    run_dir = out / "train" / "stop"
    assert len(list(run_dir.glob("*.pt.trace.json.gz"))) == 1, err
    import json

    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    assert not (out / "train" / "stop.parquet").exists()


# --- a full disk names the output, never a temporary path ------------------------------------------------


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)")
def test_a_full_disk_names_the_output_not_a_temporary_path(tmp_path):
    """A 64 KiB tmpfs, 40 KiB taken: the folder form named its stage (`.cdir.x1y2.tmp/.files/0.parquet`),
    a job's metadata file was an OSError traceback, `tb`'s writer thread printed one. Each is one line
    naming the output, and nothing is left."""
    disk = tmp_path / "disk"
    disk.mkdir()
    trace = ROOT / "fixtures/h200_probe/sync.pt.trace.json.gz"
    r0 = _rank_file(tmp_path, 0)
    r1 = _rank_file(tmp_path, 1)
    tk = f"{sys.executable} -m tracekit"
    script = f"""
mount -t tmpfs -o size=64k tmpfs "$0" || exit 77
head -c 40000 /dev/zero > "$0/filler"
{tk} parse {trace} -o "$0/cdir/"; echo "rc=$?"
{tk} parse {r0} {r1} -o "$0/jobdir/"; echo "rc=$?"
{tk} parse {r0} {r1} {trace} -o "$0/job.parquet"; echo "rc=$?"
mkdir "$0/run" && cp {r0} "$0/run/" && head -c 20000 /dev/zero > "$0/filler2"
{tk} tb "$0"; echo "rc=$?"
echo "left: $(ls -A "$0" "$0/run" | tr "\\n" " ")"
"""
    run = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, str(disk)], capture_output=True, text=True, cwd=ROOT
    )
    if run.returncode == 77 or "unshare:" in run.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {run.stderr.strip()[:200]}")
    assert run.stdout.count("rc=2") == 4, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if "warning" not in line]
    assert len(errors) == 4 and all(e.startswith("tracekit: error: cannot write ") for e in errors), (
        run.stderr
    )
    for name in ("cdir", "jobdir", "job.parquet", "run"):
        assert any(f"cannot write {disk}/{name} (No space left on device)" in e for e in errors), run.stderr
    assert ".tmp" not in run.stderr and "Traceback" not in run.stderr
    assert run.stdout.split("left:")[1].split() == [
        f"{disk}:",
        "filler",
        "filler2",
        "run",
        f"{disk}/run:",
        r0.name,
    ]


def _rank_file(tmp_path: Path, rank: int) -> Path:
    t = small_trace()
    t.meta["distributedInfo"] = {"rank": rank, "world_size": 2}
    return t.write(tmp_path / f"rank{rank}.pt.trace.json")


def test_force_never_deletes_a_users_file_inside_a_capture_folder(tmp_path, capsys):
    """`parse -o DIR/ --force` replaced a capture folder whole: a file the user had put in it went too."""
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    folder = tmp_path / "c"
    assert run_main(["parse", str(trace), "-o", f"{folder}/"], capsys)[0] == 0
    (folder / "notes.txt").write_text("mine")
    (folder / "rank=0" / "plot.png").write_bytes(b"mine")
    argv = ["parse", str(trace), "-o", f"{folder}/", "--force"]
    one_line_error(
        *run_main(argv, capsys)[::2], "holds files tracekit did not write (notes.txt, rank=0/plot.png)"
    )
    assert (folder / "notes.txt").read_text() == "mine"
    (folder / "notes.txt").unlink()
    (folder / "rank=0" / "plot.png").unlink()
    assert run_main(argv, capsys)[0] == 0
