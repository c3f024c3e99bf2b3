"""The fault table of docs/QUIRKS.md, second part: bad input and faults tried as a sceptical user would
(issue #21). Each row ends in one line and exit 2, or in a result with a warning and right numbers, and
never destroys an input or leaves a partial output or temporary file behind."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.clirun import run_main
from tests.tracebuilder import TraceBuilder
from tracekit.data import files
from tracekit.errors import OutputExistsError

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "fixtures/h200_probe/tiny.pt.trace.json.gz"


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "cap.parquet"
    cmd = [sys.executable, "-m", "tracekit", "parse", str(TINY), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def small_trace() -> TraceBuilder:
    t = TraceBuilder(device_properties=[{"id": 0, "name": "GPU"}])
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 20)
    t.launch(12, 5, corr=1)
    t.kernel("gemm", 30, 40, corr=1)
    t.step(2, 100, 200)
    t.op("aten::mm", 110, 20)
    t.launch(112, 5, corr=2)
    t.kernel("gemm", 130, 40, corr=2)
    return t


# --- the output path ---------------------------------------------------------------------------------


def test_an_output_that_is_its_own_input_is_refused(tmp_path, capture, capsys):
    """analyze -o CAP --force and whatif --trace CAP --force used to replace the capture itself."""
    cap = tmp_path / "c.parquet"
    cap.write_bytes(capture.read_bytes())
    before = cap.read_bytes()
    for argv in (
        ["analyze", str(cap), "-o", str(cap), "--force"],
        ["whatif", str(cap), "--trace", str(cap), "--force"],
        ["analyze", str(cap), "-o", str(tmp_path / "." / "c.parquet"), "--force"],  # another spelling
    ):
        one_line_error(*run_main(argv, capsys)[::2], "is also an input")
        assert cap.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet"]


def test_an_output_that_is_a_folder_is_one_line(tmp_path, capture, capsys):
    """-o DIR used to end in IsADirectoryError from the final rename."""
    folder = tmp_path / "d.png"
    folder.mkdir()
    for argv in (
        ["analyze", str(capture), "-o", str(folder), "--force"],
        ["whatif", str(capture), "--trace", str(folder), "--force"],
        ["annotate", str(capture), "-o", str(folder), "--force"],
        ["diff", str(capture), str(capture), "--plot", str(folder), "--force"],
    ):
        one_line_error(*run_main(argv, capsys)[::2], "is a folder")
    assert list(folder.iterdir()) == []


def test_outputs_get_the_umask_mode_and_keep_a_replaced_files_mode(tmp_path, capsys):
    """mkstemp's 0600 used to stay on every output; analyze --store made a 0644 capture 0600."""
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    old = os.umask(0o027)
    try:
        assert run_main(["parse", str(trace), "-o", str(tmp_path / "a.parquet")], capsys)[0] == 0
        assert run_main(["parse", str(trace), "-o", str(tmp_path / "f") + "/"], capsys)[0] == 0
        report = ["analyze", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "r.txt")]
        assert run_main(report, capsys)[0] == 0
    finally:
        os.umask(old)
    assert (tmp_path / "a.parquet").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "r.txt").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "f/_tracekit.json").stat().st_mode & 0o777 == 0o640
    os.chmod(tmp_path / "a.parquet", 0o644)
    assert run_main(["analyze", str(tmp_path / "a.parquet"), "--store"], capsys)[0] == 0
    assert (tmp_path / "a.parquet").stat().st_mode & 0o777 == 0o644


def test_a_new_output_that_appears_meanwhile_is_not_overwritten(tmp_path):
    """Two writers of one new path without --force: the second one to finish refuses, the first one's
    file stays whole (both used to 'succeed', one result silently lost)."""
    out = tmp_path / "c.parquet"
    with pytest.raises(OutputExistsError, match="appeared"), files.atomic_write(out, replace=False) as fh:
        fh.write(b"mine")
        out.write_bytes(b"the other process's")
    assert out.read_bytes() == b"the other process's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet"]
    folder = tmp_path / "f"
    with pytest.raises(OutputExistsError, match="appeared"), files.staged_folder(folder, replace=False) as st:
        (Path(st) / "x").write_bytes(b"mine")
        folder.mkdir()
        (folder / "y").write_bytes(b"theirs")
    assert sorted(p.name for p in folder.iterdir()) == ["y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet", "f"]


def test_two_parses_to_one_new_path_one_wins_one_refuses(tmp_path):
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    out = tmp_path / "c.parquet"
    cmd = [sys.executable, "-m", "tracekit", "parse", str(trace), "-o", str(out)]
    pipe = subprocess.PIPE
    procs = [subprocess.Popen(cmd, stdout=pipe, stderr=pipe, text=True) for _ in range(2)]
    results = sorted((p.wait(), p.stderr.read()) for p in procs)
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [rc for rc, _ in results] == [0, 2], results
    assert "tracekit: error:" in results[1][1] and results[1][1].count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet", "t.pt.trace.json"]


def test_a_long_legal_output_name_is_written(tmp_path, capsys):
    """A 248-byte name used to be refused: the temporary name beside it was longer than NAME_MAX."""
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    out = tmp_path / ("c" * 240 + ".parquet")
    code, _, err = run_main(["parse", str(trace), "-o", str(out)], capsys)
    assert code == 0, err
    assert out.exists()


def test_permission_denied_is_not_called_a_full_disk(tmp_path, monkeypatch, capsys):
    trace = small_trace().write(tmp_path / "t.pt.trace.json")

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    code, _, err = run_main(["parse", str(trace), "-o", str(tmp_path / "c.parquet")], capsys)
    one_line_error(code, err, "(Permission denied)", "a folder you may write to")
    assert "free some space" not in err


def test_an_output_under_a_file_is_one_line(tmp_path, capture, capsys):
    """parse -o FILE/cap/, tb FILE/run, diff --plot FILE/p.png, capture -o FILE: a path that cannot be a
    folder (the same error as a folder that cannot be written: no traceback)."""
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    one_line_error(*run_main(["parse", str(trace), "-o", f"{blocker}/cap/"], capsys)[::2], "cannot write")
    code, _, err = run_main(["parse", str(trace), "-o", f"{blocker}/c.parquet"], capsys)
    one_line_error(code, err, "cannot write")
    code, out, err = run_main(["diff", str(capture), str(capture), "--plot", f"{blocker}/p.png"], capsys)
    one_line_error(code, err, "cannot write")
    code, _, err = run_main(["capture", "tiny_ops", "-o", str(blocker), "--device", "cpu"], capsys)
    one_line_error(code, err, "is a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "t.pt.trace.json"]


def test_tb_into_a_folder_it_cannot_write(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tracekit.export.tensorboard import write_events

    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(Exception) as info:
        write_events(blocker / "run", {0: {"x": 1.0}})
    assert info.type.__name__ == "OutputWriteError" and "cannot write" in str(info.value)


# --- signals -----------------------------------------------------------------------------------------


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out |= {int(x) for x in (task / "children").read_text().split()}
    return out


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory) -> Path:
    big = tmp_path_factory.mktemp("big") / "big.pt.trace.json"
    cmd = [sys.executable, str(ROOT / "benchmarks/gen_large_trace.py"), "--size-mb", "24", "-o", str(big)]
    subprocess.run(cmd, check=True, capture_output=True)
    return big


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
@pytest.mark.parametrize(
    "sig, form", [(signal.SIGTERM, "file"), (signal.SIGHUP, "folder"), (signal.SIGINT, "folder")]
)
def test_a_parse_stopped_by_a_signal_leaves_nothing(tmp_path, big_trace, sig, form):
    """SIGTERM/SIGHUP mid-parse used to leave .x.parquet.XXXX.tmp (or a staged folder) and two decode
    workers blocked on a pipe forever. Now: the clean-up of Ctrl-C, exit 128+N, one line."""
    big = big_trace
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / ("c.parquet" if form == "file" else "c/")
    env = {**os.environ, "TRACEKIT_WORKERS": "2", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "parse", str(big), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:  # until the temporary output and workers exist
        workers |= _children(proc.pid)
        if workers and any(p.name.startswith(".") for p in out_dir.iterdir()):
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.skip("the parse finished before it could be stopped (a fast machine)")
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # a hang: where each thread is (faulthandler, on SIGABRT)
        proc.send_signal(signal.SIGABRT)
        for w in workers | _children(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(w, signal.SIGKILL)
        dump = proc.communicate(timeout=30)[1][-5000:]
        raise AssertionError(f"no exit after {signal.Signals(sig).name}:\n{dump}") from None
    assert proc.returncode == 128 + sig, err
    name = "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"
    assert err.strip() == f"tracekit: {name}"
    assert list(out_dir.iterdir()) == []
    # the workers are told to stop as the parent exits: give them the time a loaded machine takes
    deadline = time.monotonic() + 10
    while (alive := [w for w in workers if Path(f"/proc/{w}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"decode workers left running: {alive}"


# A stop signal's handler runs in the main thread just after a C call returns (or as a function starts):
# run there by a profile function, with that frame, as the interpreter runs it when the signal came
# during the call. The moments at a pool's future's lock, in the main thread, where a raised stop broke it.
_AT_A_FUTURES_LOCK = """
import signal, sys, threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from tracekit.data import pool
CODE, EVENT = getattr(threading.Condition, {where!r}).__code__, {event!r}
futures = {{}}
submit = ProcessPoolExecutor.submit
def submit_kept(self, *args, **kwargs):
    future = submit(self, *args, **kwargs)
    futures[id(future._condition)] = future
    return future
def at_the_lock(frame, event, arg):
    if event == EVENT and frame.f_code is CODE:
        future = futures.get(id(frame.f_locals["self"]))
        if future is not None and not future.done():  # the manager thread will take its lock
            sys.setprofile(None)
            Path("fired").touch()
            signal.getsignal(signal.SIGHUP)(signal.SIGHUP, frame)
map_ = pool.ForkPool.map
def map_then_stop(self, *args, **kwargs):
    sys.setprofile(at_the_lock)
    yield from map_(self, *args, **kwargs)
ProcessPoolExecutor.submit, pool.ForkPool.map = submit_kept, map_then_stop
"""


@pytest.mark.parametrize(
    "where, event",
    [("__enter__", "c_return"), ("__exit__", "call")],  # the future's lock just taken; not yet given up
)
def test_a_stop_at_a_futures_lock_still_ends_the_parse(tmp_path, big_trace, where, event):
    """A SIGHUP that came just as the main thread took a future's lock (Future.result,
    add_done_callback), or was about to give it up: raised there, the lock stayed taken (the `with` had
    not begun, or was leaving), the pool's manager thread waited for it forever, and the pool's shut-down
    for the manager thread: the parse hung. The pool takes its futures' locks inside signals.held()."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    setup = _AT_A_FUTURES_LOCK.format(where=where, event=event)
    argv = ["parse", str(big_trace), "-o", str(out_dir / "c")]
    (tmp_path / "run_tracekit.py").write_text(
        f"{setup}sys.argv = ['tracekit', *{argv!r}]\nfrom tracekit.__main__ import main\nmain()\n"
    )
    code, err = _run_in_own_group([sys.executable, "-m", "run_tracekit"], tmp_path)
    assert (tmp_path / "fired").exists()
    assert (code, err.strip()) == (128 + signal.SIGHUP, "tracekit: stopped by SIGHUP"), err
    assert list(out_dir.iterdir()) == []


def test_a_stop_anywhere_in_the_pools_main_thread_code_is_raised_and_shuts_it_down(tmp_path):
    """The same, at every moment of a pool's work where the main thread runs a C call or starts a
    function (its own code, concurrent.futures', threading's, queue's, the wake-up pipe's), once each:
    the pool is stopped each time, shut down, with no other error (the lock a `with` gives up, given up
    already by Condition.wait, was a RuntimeError)."""
    code = (
        "import signal, sys\n"
        "from tracekit.data import pool, signals\n"
        "from tracekit.errors import Terminated\n"
        "signals.install()\n"
        "tried, runs = set(), 0\n"
        "def work(i):\n"
        "    return i\n"
        "while True:\n"
        "    fired = []\n"
        "    def stop_here(frame, event, arg):\n"
        "        at = (frame.f_code, frame.f_lasti, event)\n"
        "        if event in ('call', 'c_return') and at not in tried:\n"
        "            tried.add(at)\n"
        "            fired.append(f'{frame.f_code.co_name} {frame.f_lasti} {event}')\n"
        "            sys.setprofile(None)\n"
        "            signal.getsignal(signal.SIGHUP)(signal.SIGHUP, frame)\n"
        "    try:\n"
        "        with pool.ForkPool(2) as workers:\n"
        "            workers.submit(work, 0)  # started: its workers forked, its threads running\n"
        "            sys.setprofile(stop_here)\n"
        "            for _ in workers.map(work, range(6)):\n"
        "                pass\n"
        "            sys.setprofile(None)\n"
        "        ended = 'not stopped'\n"
        "    except Terminated:\n"
        "        ended = 'stopped'\n"
        "    except Exception as exc:\n"
        "        ended = repr(exc)\n"
        "    sys.setprofile(None)\n"
        "    signals.STOPPED_BY.clear()\n"
        "    runs += 1\n"
        "    if not fired:\n"
        "        break\n"
        "    if ended != 'stopped':\n"
        "        print(fired[0], ended)\n"
        "print(runs, 'runs')\n"
    )
    rc, err = _run_in_own_group([sys.executable, "-c", code], ROOT, out=tmp_path / "out.txt")
    out = (tmp_path / "out.txt").read_text()
    assert rc == 0, err
    *failed, last = out.splitlines()
    assert failed == [] and int(last.split()[0]) > 30, out


def _run_in_own_group(cmd: list[str], cwd: Path, out: Path | None = None) -> tuple[int, str]:
    """Run `cmd` in a process group of its own; (its exit status, its stderr). A hang fails with where
    each thread was (faulthandler), and no process of the group outlives the call (the decode workers)."""
    env = {**os.environ, "TRACEKIT_WORKERS": "2", "PYTHONFAULTHANDLER": "1"}
    with open(out or os.devnull, "w") as stdout:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            time.sleep(1)
            _kill_group(proc.pid)
            raise AssertionError(f"no exit:\n{proc.communicate(timeout=30)[1][-5000:]}") from None
    deadline = time.monotonic() + 5
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _group_alive(proc.pid)
    _kill_group(proc.pid)
    assert not left, "worker processes left running"
    return proc.returncode, err


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def test_ctrl_c_while_starting_is_one_line(tmp_path):
    """A KeyboardInterrupt while typer and the commands are still importing: no traceback."""
    code = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'typer':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "sys.argv = ['tracekit', '--version']\n"
        "from tracekit.__main__ import main\n"
        "main()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 130
    assert run.stderr.strip() == "tracekit: interrupted"


def test_ctrl_c_lost_in_a_callback_still_stops_the_parse(tmp_path, monkeypatch, capsys):
    """Python's KeyboardInterrupt raised inside a weakref callback is printed as "Exception ignored" and
    lost: the parse went on and exited 0. tracekit's handler records the stop and raises it again once
    the callback has returned (or, at the latest, before the output is committed)."""
    import weakref

    from tracekit.parse import parser

    class Thing:
        pass

    check = parser._sanity.check

    def check_then_ctrl_c(*args, **kwargs):
        def callback(_ref) -> None:
            signal.raise_signal(signal.SIGINT)
            for _ in range(10_000):  # Python code: the handler runs here, inside the callback
                pass

        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing  # the callback runs now
        assert ref() is None
        return check(*args, **kwargs)

    monkeypatch.setattr(parser._sanity, "check", check_then_ctrl_c)
    out = tmp_path / "c.parquet"
    code, _, err = run_main(
        ["parse", str(small_trace().write(tmp_path / "t.pt.trace.json")), "-o", str(out)], capsys
    )
    assert (code, err.strip()) == (130, "tracekit: interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pt.trace.json"]


def _tracekit_with(tmp_path: Path, setup: str, *argv: str) -> subprocess.CompletedProcess:
    """`tracekit ARGV` as the script runs it (tracekit.__main__), after `setup` ran in its interpreter."""
    script = tmp_path / "run_tracekit.py"
    script.write_text(
        f"import sys\n{setup}\nsys.argv = ['tracekit', *{list(argv)!r}]\n"
        "from tracekit.__main__ import main\nmain()\n"
    )
    # -m, as `python -m tracekit` runs (Py_RunMain reads CPython's unhandled-Ctrl-C flag after a SystemExit)
    return subprocess.run([sys.executable, "-m", script.stem], capture_output=True, text=True, cwd=tmp_path)


def test_ctrl_c_inside_code_run_by_exec_exits_130(tmp_path):
    """CPython 3.11 kills the process by SIGINT at exit (status -2) once a KeyboardInterrupt of exactly
    that class left code run by exec() of a string, even if it was caught: dataclasses build methods so,
    and 1 in 5 Ctrl-C at start-up ended "tracekit: interrupted", then -2. tracekit raises a subclass."""
    setup = (
        "import tracekit.cli\n"
        "def register(*args):\n"
        "    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10**5): pass')\n"
        "tracekit.cli._register_commands = register\n"
    )
    run = _tracekit_with(tmp_path, setup, "--version")
    assert (run.returncode, run.stderr.strip()) == (130, "tracekit: interrupted")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_while_starting_is_one_line(tmp_path, sig):
    """SIGTERM/SIGHUP while typer and the commands were still importing: killed by the default action
    (the handlers came with the CLI). tracekit/__main__.py installs them before importing it."""
    setup = (
        "import os, time\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'typer':\n"
        f"            os.kill(os.getpid(), {int(sig)})\n"
        "            time.sleep(0.01)\n"
        "sys.meta_path.insert(0, Stop())\n"
    )
    run = _tracekit_with(tmp_path, setup, "--version")
    assert run.returncode == 128 + sig, run.stderr
    assert run.stderr.strip() == f"tracekit: stopped by {signal.Signals(sig).name}"


def test_a_stop_signal_after_the_command_ended_is_ignored(tmp_path):
    """Once the exit status is decided (the output complete), a stop signal is ignored: raised in the
    CLI's last lines it was a traceback, and during the interpreter's exit it killed the process (-15)."""
    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    out = tmp_path / "c.parquet"
    setup = (
        "import os, signal, time\n"
        "from tracekit.data import signals\n"
        "settle = signals.settle\n"
        "def settle_then_term():\n"
        "    settle()\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.01)\n"
        "signals.settle = settle_then_term\n"
    )
    run = _tracekit_with(tmp_path, setup, "parse", str(trace), "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"wrote {out}")


def test_stdout_that_is_not_utf8(capture):
    """PYTHONIOENCODING=ascii: 'µ' and '−' used to end the report with UnicodeEncodeError."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    run = subprocess.run(
        [sys.executable, "-m", "tracekit", "analyze", str(capture)], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "rank 0" in run.stdout


def test_a_file_name_that_is_not_utf8(tmp_path):
    """A non-UTF-8 byte in an input or output name (pyarrow's paths are UTF-8) used to be a traceback;
    the name is printed back as its own bytes."""
    src = bytes(tmp_path) + b"/bad\xff.pt.trace.json"
    small_trace().write(Path(os.fsdecode(src)))
    out = bytes(tmp_path) + b"/out\xfe.parquet"
    tk = [sys.executable, "-m", "tracekit"]
    run = subprocess.run([*tk, "parse", src, "-o", out], capture_output=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(b"wrote " + out + b": ")
    run = subprocess.run([*tk, "analyze", out], capture_output=True)
    assert run.returncode == 0, run.stderr
    assert b"bad\xff.pt.trace.json" in run.stdout


# --- option values ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--set", "launch=1e12"], "≤ 1e+06"),
        (["--set", "launch=1e308"], "≤ 1e+06"),
        (["--kernels", "gemm=1e300"], "≤ 1e+06"),
        (["--python-speedup", "1e-300"], "from 1e-06 to 1e+06"),
        (["--python-speedup", "1e300"], "from 1e-06 to 1e+06"),
    ],
)
def test_whatif_factors_beyond_the_replays_range(capture, capsys, argv, needle):
    """launch=1e12 used to print a negative step; 1e308 a -35 % 'speed-up'; speedup 1e-300 a negative step."""
    one_line_error(*run_main(["whatif", str(capture), *argv], capsys)[::2], needle)


def test_whatif_largest_factors_give_a_positive_prediction(capture, capsys):
    from tracekit.data.store import read_capture
    from tracekit.whatif.predict import whatif
    from tracekit.whatif.scenario import WhatIfOptions

    cap = read_capture(capture)
    result, _ = whatif(cap, WhatIfOptions(["launch=1e6", "framework=1e6"], python_speedup=1e-6))
    for d in result.devices:
        assert all(p > r > 0 for p, r in zip(d.predicted_step_ns, d.replayed_step_ns))


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["analyze", "{cap}", "--sync-tolerance-us", "inf"], "--sync-tolerance-us"),
        (["diff", "{cap}", "{cap}", "--top-ops", "-1"], "--top-ops"),
        (["diff", "{cap}", "{cap}", "--compare", "unknown_knob"], "--compare unknown_knob"),
        (["capture", "tiny_ops", "--set", "n_ops=-5", "-o", "{tmp}"], "n_ops=-5: must be at least 1"),
        (["capture", "tiny_ops", "--set", "size=nan", "-o", "{tmp}"], "size=nan"),
    ],
)
def test_option_values_that_were_silently_accepted(tmp_path, capture, capsys, argv, needle):
    argv = [a.format(cap=capture, tmp=tmp_path / "o") for a in argv]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and needle in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


# --- damaged captures, odd inputs ---------------------------------------------------------------------


def _rewrite(capture: Path, out: Path, change) -> Path:
    import pyarrow.parquet as pq

    table = pq.read_table(capture)
    table = change(table) or table
    pq.write_table(table, out)
    return out


def test_a_damaged_capture_file_is_one_line(tmp_path, capture, capsys):
    """A column dropped or retyped by another tool, metadata of the wrong shape: one line naming the
    damage (a KeyError traceback, a 33-line schema dump, or an analysis of the retyped column)."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = json.loads(pq.read_metadata(capture).metadata[b"tracekit"])

    def with_md(t, doc=None):
        return t.replace_schema_metadata({b"tracekit": json.dumps(doc or meta).encode()})

    dropped = _rewrite(capture, tmp_path / "dropped.parquet", lambda t: with_md(t.drop(["dur_ns"])))

    def retype(t):
        j = t.schema.get_field_index("ts_ns")
        return with_md(t.set_column(j, pa.field("ts_ns", pa.string()), t.column("ts_ns").cast(pa.string())))

    retyped = _rewrite(capture, tmp_path / "retyped.parquet", retype)
    traces = _rewrite(
        capture, tmp_path / "traces.parquet", lambda t: with_md(t, {**meta, "traces": {"x": 1}})
    )
    cases = [
        (dropped, "has no column 'dur_ns'"),
        (retyped, "column 'ts_ns' is string, not int64"),
        (traces, "'traces' is not a list of objects"),
    ]
    for path, needle in cases:
        for command in ("analyze", "whatif", "info"):
            one_line_error(*run_main([command, str(path)], capsys)[::2], needle)


def test_a_damaged_capture_folder_is_one_line(tmp_path, capsys):
    """A folder part's rank that is not an int; a part path pointing outside the folder (tracekit would
    read any file the metadata names)."""

    trace = small_trace().write(tmp_path / "t.pt.trace.json")
    folder = tmp_path / "c"
    assert run_main(["parse", str(trace), "-o", f"{folder}/"], capsys)[0] == 0
    meta_path = folder / "_tracekit.json"
    meta = json.loads(meta_path.read_text())
    for change, needle in (
        ({"rank": "zero"}, "a part's rank is 'zero'"),
        ({"path": "../t.pt.trace.json"}, "not a file inside the capture folder"),
        ({"path": "/etc/passwd"}, "not a file inside the capture folder"),
    ):
        doc = {**meta, "parts": [{**meta["parts"][0], **change}]}
        meta_path.write_text(json.dumps(doc))
        one_line_error(*run_main(["analyze", str(folder)], capsys)[::2], needle)


def test_symbolic_link_loops_and_dangling_links_say_so(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "d").symlink_to(tmp_path / "nothing")
    for command in (["parse", "-o", str(tmp_path / "o.parquet")], ["analyze"], ["info"]):
        one_line_error(*run_main([command[0], str(tmp_path / "a"), *command[1:]], capsys)[::2], "link loop")
        one_line_error(
            *run_main([command[0], str(tmp_path / "d"), *command[1:]], capsys)[::2], "does not exist"
        )


def test_a_rank_beyond_int32_is_one_line(tmp_path, capsys):
    t = small_trace()
    t.meta["distributedInfo"] = {"rank": 2**31, "world_size": 1}
    trace = t.write(tmp_path / "t.pt.trace.json")
    code, _, err = run_main(["parse", str(trace), "-o", str(tmp_path / "c.parquet")], capsys)
    one_line_error(code, err, "distributedInfo.rank is 2147483648")
    assert not (tmp_path / "c.parquet").exists()


# --- what no profiler writes (tracekit/parse/sanity.py) ------------------------------------------------


def _trace_with(tmp_path: Path, change) -> Path:
    t = small_trace()
    doc = t.build()
    doc = change(doc) or doc
    path = tmp_path / "t.pt.trace.json"
    path.write_text(__import__("json").dumps(doc))
    return path


def _events(doc, cat=None, name=None):
    return [
        e
        for e in doc["traceEvents"]
        if (cat is None or e.get("cat") == cat) and (name is None or e.get("name") == name)
    ]


def test_an_event_list_repeated_is_refused(tmp_path, capsys):
    """traceEvents repeated twice: parse said 16 steps, analyze 8, kernel and op totals doubled, the
    profiler-cost estimate halved. Two overlapping files of one rank are refused for this reason."""
    trace = _trace_with(tmp_path, lambda d: d.update(traceEvents=d["traceEvents"] * 2))
    for argv in (["parse", str(trace), "-o", str(tmp_path / "c.parquet")], ["analyze", str(trace)]):
        one_line_error(
            *run_main(argv, capsys)[::2], "exact copies of another", "every figure would count twice"
        )
    assert not (tmp_path / "c.parquet").exists()


def test_a_few_copied_events_are_a_warning(tmp_path, capsys):
    def copy_one(doc):
        doc["traceEvents"].append(dict(_events(doc, cat="cpu_op")[0]))

    trace = _trace_with(tmp_path, copy_one)
    code, out, err = run_main(["analyze", str(trace)], capsys)
    assert code == 0, err
    assert "1 of 7 events are exact copies of another" in err
    assert "warning: " in out and "exact copies" in out  # the report repeats it


def test_a_repeated_step_number_is_refused(tmp_path, capsys):
    """Every step named ProfilerStep#5: a normal-looking report while --check failed and diff saw 1 step."""

    def rename(doc):
        for e in _events(doc, cat="user_annotation"):
            e["name"] = "ProfilerStep#5"

    trace = _trace_with(tmp_path, rename)
    code, _, err = run_main(["analyze", str(trace)], capsys)
    one_line_error(code, err, "ProfilerStep#5 2 times")  # analysis.steps.check_step_numbers (#17)


def test_a_negative_step_duration_is_refused(tmp_path, capsys):
    """ProfilerStep spans with negative durations turned a GPU trace into '0 steps … CPU-only capture'."""

    def negative(doc):
        _events(doc, cat="user_annotation")[0]["dur"] = -100

    code, _, err = run_main(["analyze", str(_trace_with(tmp_path, negative))], capsys)
    one_line_error(code, err, "ProfilerStep#1 has a negative duration")


def test_overlapping_steps_and_negative_host_durations_are_warnings(tmp_path, capsys):
    def odd(doc):
        _events(doc, cat="user_annotation")[0]["dur"] = 150  # step 1 runs 50 µs into step 2
        _events(doc, cat="cpu_op")[0]["dur"] = -5

    code, out, err = run_main(["analyze", str(_trace_with(tmp_path, odd))], capsys)
    assert code == 0, err
    assert "1 step(s) overlap the next one (most: ProfilerStep#1 and ProfilerStep#2, by 0.050 ms)" in err
    assert "1 host op(s) with a negative duration" in err


def test_a_device_id_beyond_int32_is_a_warning(tmp_path, capsys):
    """args.device 2^33 became null silently (the kernel left out of the busy time)."""

    def far(doc):
        _events(doc, cat="kernel")[0]["args"]["device"] = 2**33

    code, out, err = run_main(["analyze", str(_trace_with(tmp_path, far))], capsys)
    assert code == 0, err
    assert "1 device activity without a usable device id" in err


def test_a_kernel_without_a_duration_is_a_warning_and_check_holds(tmp_path, capsys):
    """A kernel whose `dur` is missing (or not a number) is read as [t, t): no busy time. `--check`
    counted such an empty kernel inside an idle gap as overlapping it (exit 3 on 2 fuzzed traces).
    GIVEN step 1 = [0, 100) µs, gemm [30, 70), kernel `lost` at 80 µs without dur
    THEN busy 40 µs, idle 60 µs, the invariants hold, and a warning says the dur was read as 0."""

    t = small_trace()
    t.launch(75, 2, corr=3)
    t.kernel("lost", 80, 5, corr=3)
    trace = t.write(tmp_path / "t.pt.trace.json")
    doc = json.loads(trace.read_text())
    del _events(doc, name="lost")[0]["dur"]
    trace.write_text(json.dumps(doc))
    code, out, err = run_main(["analyze", str(trace), "--check", "--json"], capsys)
    assert code == 0, err
    assert "ok: idle never overlaps a device activity event" in err
    assert "1 device activity dur missing or not a number (read as 0)" in err
    sample = json.loads(out)["devices"][0]["samples"][0]
    assert (sample["dur_ns"], sample["busy_ns"], sum(sample["idle_ns"].values())) == (100_000, 40_000, 60_000)


def test_kernels_overlapping_on_one_stream_are_a_warning(tmp_path, capsys):
    """Two kernels on one stream that overlap in time (a stream runs one at a time): a merged or damaged
    trace, which passed unremarked. GIVEN step 1 = [0, 100) µs, gemm [30, 70) and `late` [50, 80) on
    stream 7: overlap 20 µs > 10 µs; THEN a warning naming `late` and 0.020 ms, repeated by the report,
    and busy = |[30, 80)| = 50 µs (a union: the overlap is not counted twice)."""
    t = small_trace()
    t.launch(40, 2, corr=3)
    t.kernel("late", 50, 30, corr=3)
    code, out, err = run_main(["analyze", str(t.write(tmp_path / "t.pt.trace.json")), "--json"], capsys)
    assert code == 0, err
    warning = "1 device activity starts more than 10 µs before an earlier one on its stream ends"
    assert warning in err and "(most: late on device 0 stream 7, by 0.020 ms)" in err
    report = json.loads(out)
    assert any(warning in w for w in report["capture"]["warnings"])
    sample = report["devices"][0]["samples"][0]
    assert (sample["busy_ns"], sum(sample["idle_ns"].values())) == (50_000, 50_000)


def test_real_same_stream_overlaps_are_not_warned(tmp_path, capsys):
    """What real traces hold (benchmarks/stream_overlaps.py): the kernels of one CUDA graph launch (one
    correlation id) overlap on the launch's stream (HTA test: up to 13 µs), and programmatic dependent
    launch starts a kernel up to 6.75 µs early (H200 cuDNN). Neither is warned."""
    t = small_trace()
    t.kernel("same graph launch", 50, 30, corr=1)  # gemm's correlation: one graph launch
    t.launch(160, 2, corr=3)
    t.kernel("dependent launch", 165, 10, corr=3)  # 5 µs before gemm [130, 170) ends
    code, out, err = run_main(["analyze", str(t.write(tmp_path / "t.pt.trace.json"))], capsys)
    assert code == 0, err
    assert "stream ends" not in err and "warning" not in out


def test_device_activity_days_after_the_host_is_refused(tmp_path, capsys):
    """Every kernel 11.5 days late: the device clock is not the host's (analyze dropped them silently,
    whatif's observed step was 125,000,000 ms). One kernel 11.5 days late is a stray: left out and
    named (issue 41: an impossible time)."""

    def late(doc):
        for e in _events(doc, cat="kernel"):
            e["ts"] += 11.5 * 86400e6

    trace = _trace_with(tmp_path, late)
    for command in ("analyze", "whatif"):
        one_line_error(
            *run_main([command, str(trace)], capsys)[::2], "276.0 hours after the host's last event"
        )

    def one_late(doc):
        _events(doc, cat="kernel")[-1]["ts"] += 11.5 * 86400e6

    code, _, err = run_main(["analyze", str(_trace_with(tmp_path, one_late))], capsys)
    assert code == 0 and "1 event with an impossible time (most: gemm (kernel), starting 276.0 h after" in err


def test_a_gpu_trace_without_its_kernels_is_not_called_cpu_only(tmp_path, capsys):
    """Launch calls kept, device activity missing: the report said 'CPU-only capture'."""

    def drop_kernels(doc):
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]

    code, out, err = run_main(["analyze", str(_trace_with(tmp_path, drop_kernels))], capsys)
    assert code == 0, err
    assert "CPU-only capture" not in out
    assert "the trace lost its GPU events" in " ".join(out.split())
    t = TraceBuilder()  # a real CPU-only trace (no launch calls) keeps its note
    t.step(1, 0, 100)
    t.op("aten::mm", 10, 20)
    code, out, err = run_main(["analyze", str(t.write(tmp_path / "cpu.pt.trace.json"))], capsys)
    assert code == 0 and "CPU-only capture" in out, err
