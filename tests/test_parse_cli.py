"""`tracekit parse` as users run it: in-process through main(), and as `python -m tracekit`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.cli import get_app
from tracekit.data.store import read_capture

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "fixtures" / "h200_probe" / "mlp.pt.trace.json.gz"


def test_parse_writes_a_capture(tmp_path, capsys):
    out = tmp_path / "c.parquet"
    code, stdout, _ = run_main(["parse", str(PROBE), "-o", str(out)], capsys)
    assert code == 0
    assert stdout.startswith(f"wrote {out}: 2405 events, 1 rank(s), 3 step(s) from 1 file(s)")
    capture = read_capture(out)
    assert capture.meta["sources"][0]["path"] == PROBE.name
    assert capture.summary()["steps"] == 3


def test_existing_output_needs_force(tmp_path, capsys):
    out = tmp_path / "c.parquet"
    out.write_bytes(b"keep me")
    code, _, err = run_main(["parse", str(PROBE), "-o", str(out)], capsys)
    assert (code, err.strip()) == (2, f"tracekit: error: {out} exists; pass --force to overwrite")
    assert out.read_bytes() == b"keep me"
    code, _, _ = run_main(["parse", str(PROBE), "-o", str(out), "--force"], capsys)
    assert code == 0 and read_capture(out).table.num_rows > 0


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("not json at all")
    code, out, err = run_main(["parse", str(bad), "-o", str(tmp_path / "c.parquet")], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"tracekit: error: {bad}: not JSON")
    assert not (tmp_path / "c.parquet").exists()


def test_truncated_trace_and_salvage(tmp_path, capsys):
    t = TraceBuilder()
    t.step(1, 0, 100)
    for i in range(20):
        t.op(f"op{i}", i * 4, 2)
    full = t.write(tmp_path / "full.json").read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(full[: len(full) - 40])
    out = tmp_path / "c.parquet"
    code, _, err = run_main(["parse", str(cut), "-o", str(out)], capsys)
    assert code == 2 and "pass --salvage" in err and not out.exists()
    code, stdout, err = run_main(["parse", str(cut), "-o", str(out), "--salvage"], capsys)
    assert code == 0 and out.exists()
    assert err.startswith("salvaged cut.json: kept ") and "dropped the last" in err


def test_output_that_is_also_an_input_is_refused(tmp_path, capsys):
    trace = TraceBuilder().write(tmp_path / "t.json")
    code, _, err = run_main(["parse", str(trace), "-o", str(trace), "--force"], capsys)
    assert code == 2 and "is also an input" in err


def test_python_dash_m_tracekit_parse(tmp_path):
    out = tmp_path / "c.parquet"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tracekit", "parse", str(PROBE), "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and out.exists()
    missing = subprocess.run(
        [sys.executable, "-m", "tracekit", "parse", str(tmp_path / "nope.json"), "-o", str(out), "--force"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"tracekit: error: {tmp_path / 'nope.json'}: no such file or folder"
    assert "Traceback" not in missing.stderr


@pytest.mark.parametrize("args", [["parse"], ["parse", "x.json"]])
def test_usage_errors(args):
    from typer.testing import CliRunner

    result = CliRunner().invoke(get_app(), args)
    assert result.exit_code == 2 and "Missing" in result.output


def test_parse_shows_progress_on_a_terminal_only(tmp_path):
    """With stderr on a terminal, a `parsing NAME: N% of M MiB` line ends at 100%; piped, nothing."""
    import pty

    trace = Path(__file__).resolve().parent.parent / "fixtures" / "hta" / "nccl_data.json.gz"
    env = {**os.environ, "TRACEKIT_WORKERS": "2"}
    cmd = [sys.executable, "-m", "tracekit", "parse", str(trace), "-o", str(tmp_path / "a.parquet")]
    main_fd, child_fd = pty.openpty()
    proc = subprocess.run(cmd, stderr=child_fd, stdout=subprocess.PIPE, env=env, timeout=120)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 4096)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not data:
            break
        chunks.append(data)
    os.close(main_fd)
    shown = b"".join(chunks).decode()
    assert proc.returncode == 0
    assert "parsing nccl_data.json.gz:" in shown and "100% of" in shown
    piped = subprocess.run(
        cmd[:-1] + [str(tmp_path / "b.parquet")], capture_output=True, text=True, env=env, timeout=120
    )
    assert piped.returncode == 0 and "parsing" not in piped.stderr
