"""The fault table of docs/QUIRKS.md, inputs (issue #41): inputs that are not regular files are refused
up front (FIFOs never hang); a run's file that is a dangling link or a FIFO is never left out silently;
inputs from different runs, or the same input twice, are refused or named; a name with a comma is one
path; odd settings are refused, not ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.test_faults_figures import four_steps
from tests.test_faults_user import one_line_error

ROOT = Path(__file__).resolve().parent.parent


def _trace(tmp_path: Path, name: str = "t.pt.trace.json", **kw) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(four_steps(**kw).build()))
    return path


@pytest.fixture
def capture(tmp_path, capsys) -> Path:
    out = tmp_path / "cap.parquet"
    assert run_main(["parse", str(_trace(tmp_path)), "-o", str(out)], capsys)[0] == 0
    return out


# --- inputs that are not regular files -----------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_input_is_refused_up_front(tmp_path):
    """A FIFO with no writer hung forever; a process substitution was refused as "not seekable" with
    no advice. Each command says what it is and what to do, at once."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for argv in (["analyze"], ["info"], ["whatif"], ["parse", "-o", str(tmp_path / "c.parquet")]):
        cmd = [sys.executable, "-m", "tracekit", argv[0], str(fifo), *argv[1:]]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
        one_line_error(
            run.returncode, run.stderr, "is a FIFO (named pipe), not a file", "write what it carries"
        )
    shell = f"{sys.executable} -m tracekit analyze <(cat {_trace(tmp_path)})"
    run = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, cwd=ROOT)
    one_line_error(run.returncode, run.stderr, "not a file", "a shell's <(...)")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_rank_file_that_is_a_dangling_link_or_a_fifo_is_not_left_out(tmp_path, capsys):
    """A run folder whose rank-1 file was a dangling link (or a FIFO) was analysed as rank 0 alone,
    exit 0."""
    job = tmp_path / "job"
    job.mkdir()
    _trace(job, "rank0.pt.trace.json")
    (job / "rank1.pt.trace.json").symlink_to(tmp_path / "gone.json")
    one_line_error(*run_main(["analyze", str(job)], capsys)[::2], "rank1.pt.trace.json: a symbolic link to")
    (job / "rank1.pt.trace.json").unlink()
    os.mkfifo(job / "rank1.pt.trace.json")
    one_line_error(*run_main(["analyze", str(job)], capsys)[::2], "rank1.pt.trace.json is a FIFO")


def test_two_captures_where_one_is_expected_say_so(tmp_path, capture, capsys):
    """`analyze cap.parquet cap2.parquet` said "cap.parquet: not JSON (starts with b'PAR1…')"."""
    other = tmp_path / "cap2.parquet"
    other.write_bytes(capture.read_bytes())
    one_line_error(
        *run_main(["analyze", str(capture), str(other)], capsys)[::2],
        "is a capture (Parquet), not a trace",
        "tracekit diff",
    )


# --- diff: names with commas, pooled duplicates, --by on a file -----------------------------------------


def test_a_name_with_a_comma_is_one_path(tmp_path, capture, capsys):
    """A file name containing a comma could not be diffed ("my: no such file")."""
    comma = tmp_path / "my,run.parquet"
    comma.write_bytes(capture.read_bytes())
    code, out, err = run_main(["diff", str(comma), str(capture)], capsys)
    assert code == 0, err
    assert "my,run" in out


def test_one_run_twice_in_a_pooled_side_is_refused(tmp_path, capture, capsys):
    """`diff A,A,A,A B,B,B,B` counted one capture as "24 steps in 4 runs", with intervals of zero width
    and a change called significant; a copy of a run is the same run."""
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(capture.read_bytes())
    b = _trace(tmp_path, "b.pt.trace.json", props=[{"id": 0, "name": "GPU"}, {"id": 1, "name": "x"}])
    for side, needle in (
        (f"{capture},{capture},{capture}", "name one run twice in one side"),
        (f"{capture},{tmp_path}/./cap.parquet", "name one run twice in one side"),
        (f"{capture},{copy}", "are one run (the same trace bytes)"),
    ):
        one_line_error(*run_main(["diff", side, str(b)], capsys)[::2], needle, "name each run once")


def test_diff_by_on_a_file_is_one_line(capture, capsys):
    """`tracekit diff cap.parquet --by python` was a NotADirectoryError."""
    one_line_error(*run_main(["diff", str(capture), "--by", "python"], capsys)[::2], "is a file: --by pools")


# --- traces of different runs ---------------------------------------------------------------------------


def _shifted(doc: dict, seconds: float, pid: int | None = None, rank: int | None = None) -> dict:
    doc = json.loads(json.dumps(doc))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += seconds * 1e6
        if pid is not None and e.get("pid") == 100:
            e["pid"] = pid
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    return doc


def test_two_runs_of_one_rank_are_refused(tmp_path, capsys):
    """Two runs' traces of rank 0 (other process, same step numbers, 38 s apart) were merged, exit 0:
    "idle: queued 9499.960 ms/step, 100 %", and a folder mixing two runs listed the other's file as a
    source. Profiler cycles of one run come from one process."""
    doc = four_steps().build()
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.pt.trace.json").write_text(json.dumps(doc))
    (run / "b.pt.trace.json").write_text(json.dumps(_shifted(doc, 38, pid=200)))
    for argv in (["analyze", str(run)], ["parse", str(run), "-o", str(tmp_path / "c.parquet")]):
        one_line_error(*run_main(argv, capsys)[::2], "come from different processes (pid 100 and pid 200)")


def test_ranks_that_never_ran_at_once_are_named(tmp_path, capsys):
    doc = four_steps().build()
    r0 = tmp_path / "r0.pt.trace.json"
    r0.write_text(json.dumps(_shifted(doc, 0, rank=0)))
    r1 = tmp_path / "r1.pt.trace.json"
    r1.write_text(json.dumps(_shifted(doc, 38, pid=200, rank=1)))
    code, out, err = run_main(["analyze", str(r0), str(r1), "--json", "--no-savings"], capsys)
    assert code == 0, err
    needle = "rank 1 starts 38.000 s after rank 0 ended"
    assert needle in err and any(needle in w for w in json.loads(out)["capture"]["warnings"])


# --- settings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value, needle",
    [
        ("TRACEKIT_WORKERS", "abc", "is not a whole number, 1 or more"),
        ("TRACEKIT_WORKERS", "-1", "is not a whole number, 1 or more"),
        ("TRACEKIT_WORKERS", "0", "is not a whole number, 1 or more"),
        ("TRACEKIT_WORKERS", "1.5", "is not a whole number, 1 or more"),
        ("TRACEKIT_DECODER", "bogus", "is not c or msgspec"),
        ("TRACEKIT_LOOPS", "fortran", "is not c or python"),
        ("TRACEKIT_RAY_CONNECT_TIMEOUT_S", "soon", "is not a number of seconds above 0"),
    ],
)
def test_a_setting_that_cannot_be_read_is_one_line(capture, capsys, monkeypatch, name, value, needle):
    """TRACEKIT_WORKERS=abc|-1|0|1.5 and TRACEKIT_DECODER=bogus were silently ignored."""
    monkeypatch.setenv(name, value)
    one_line_error(*run_main(["info", str(capture)], capsys)[::2], f"{name}={value!r} {needle}", "unset it")


def test_settings_that_can_be_read_are_used(capture, capsys, monkeypatch):
    from tracekit.data.pool import workers
    from tracekit.settings import setting

    monkeypatch.setenv("TRACEKIT_WORKERS", "3")
    monkeypatch.setenv("TRACEKIT_DECODER", "")  # empty: the default
    assert workers() == 3 and setting("TRACEKIT_DECODER") is None
    assert run_main(["info", str(capture)], capsys)[0] == 0


# --- a capture folder without its index, a byte order mark, a manifest cut short ------------------------


def test_a_capture_folder_without_its_index_says_so(tmp_path, capsys):
    """A capture folder whose _tracekit.json was lost was "no trace files in this folder (it has
    folders: rank=0; name one run folder)"."""
    folder = tmp_path / "cap"
    assert run_main(["parse", str(_trace(tmp_path)), "-o", f"{folder}/"], capsys)[0] == 0
    (folder / "_tracekit.json").unlink()
    for command in ("analyze", "info", "whatif"):
        one_line_error(
            *run_main([command, str(folder)], capsys)[::2],
            "a capture folder without its _tracekit.json (rank=0/part-0.parquet is there)",
        )


@pytest.mark.parametrize("gz", [False, True])
def test_a_trace_with_a_utf8_byte_order_mark_is_read(tmp_path, capsys, gz):
    """A UTF-8 BOM (Windows editors write one) was refused as "not JSON"; JSON lets a parser ignore it."""
    import gzip

    plain = _trace(tmp_path)
    want = json.loads(run_main(["analyze", str(plain), "--json", "--no-savings"], capsys)[1])
    data = b"\xef\xbb\xbf" + plain.read_bytes()
    bom = tmp_path / ("bom.pt.trace.json.gz" if gz else "bom.pt.trace.json")
    bom.write_bytes(gzip.compress(data) if gz else data)
    code, out, err = run_main(["analyze", str(bom), "--json", "--no-savings"], capsys)
    assert code == 0, err
    got = json.loads(out)
    assert got["devices"] == want["devices"] and got["host"] == want["host"]


def test_a_manifest_cut_short_is_named_and_no_other_runs_manifest_is_used(tmp_path, capsys):
    """A truncated manifest.json was ignored silently while another run's manifest labelled the report."""
    ra, rb = tmp_path / "ra", tmp_path / "rb"
    ra.mkdir()
    rb.mkdir()
    _trace(ra, "rank0.pt.trace.json")
    (rb / "rank1.pt.trace.json").write_text(json.dumps(_shifted(four_steps().build(), 0, rank=1)))
    (ra / "manifest.json").write_text('{"run": "a", "workload": "x", "sta')
    (rb / "manifest.json").write_text(json.dumps({"run": "b", "workload": "y"}))
    code, out, err = run_main(["analyze", str(ra), str(rb), "--json", "--no-savings"], capsys)
    assert code == 0, err
    assert f"cannot read {ra / 'manifest.json'}" in err and "the capture has no manifest" in err
    assert json.loads(out)["capture"].get("run") is None
    (ra / "manifest.json").write_text(json.dumps({"run": "a", "workload": "x"}))
    one_line_error(
        *run_main(["analyze", str(ra), str(rb)], capsys)[::2], "are run folders of different runs (their"
    )


def test_a_kernel_without_a_name_ends_a_gap_in_the_report(tmp_path, capsys):
    # GIVEN a step whose second kernel lost its name (found by benchmarks/fuzz_cli.py, seed 8: the gaps
    #       table tried to shorten a NaN)
    from tests.tracebuilder import TraceBuilder

    t = TraceBuilder()
    t.step(1, 0, 100)
    t.launch(1, 2, corr=1)
    t.kernel("k1", 5, 10, corr=1)
    t.launch(40, 2, corr=2)
    t.kernel("k2", 50, 10, corr=2)
    doc = t.build()
    for e in doc["traceEvents"]:
        if e.get("name") == "k2":
            del e["name"]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(doc))
    code, out, err = run_main(["analyze", str(path)], capsys)
    # THEN the report is written, the gap's next kernel unnamed
    assert code == 0 and "Traceback" not in err and "largest idle gaps" in out
