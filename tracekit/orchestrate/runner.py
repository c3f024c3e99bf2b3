"""Run captures from tracekit's own environment: one child process per interpreter, then parse.

    from tracekit.orchestrate.runner import run_capture
    paths = run_capture("heavy_mlp", Path("out"), pythons=["3.9", None], device="cpu",
                        knobs={"batch_size": 8}, schedule="wait=1,warmup=1,active=3,repeat=2")

For each interpreter this starts `[python, "-m", "tracekit.capture", ...]` with tracekit's parent folder on
PYTHONPATH (so the dependency-free capture package and the `workloads/` package import there, whether
tracekit is installed editable or not), which writes `OUT/<workload>/<run>/` (a TensorBoard logdir with
manifest.json), then parses that folder into `OUT/<workload>/<run>.parquet` with the manifest in its
metadata. Progress goes to stderr. Nothing existing is overwritten without `force`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from tracekit.capture.knobs import (
    COMMON_KNOBS,
    KnobError,
    format_schedule,
    parse_schedule,
    resolve_knobs,
)
from tracekit.capture.memory import EXIT_OOM
from tracekit.capture.recorder import MANIFEST_NAME, TRACE_SUFFIX
from tracekit.capture.workload import knobs_of
from tracekit.compare.stats import DEFAULT_CONFIDENCE, runs_for_interval
from tracekit.data import signals
from tracekit.data.files import new_folders_removed_on_failure, write_error
from tracekit.data.store import check_output, check_parents, write_capture
from tracekit.errors import CaptureError, OutputExistsError, TracekitError
from tracekit.export.tensorboard import event_files
from tracekit.orchestrate import interpreters
from tracekit.parse.parser import parse_paths

Echo = Callable[[str], None]
# Kineto (torch 2.x) prints a line like this to stderr at each profiler start and stop: noise to a reader.
KINETO_USDT = re.compile(rb"^USDT:\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] profiler_(start|stop)\s*$")
Summarize = Callable[[Path, Any], object]  # (run folder, its parsed Capture)
_INTERRUPT_GRACE_S = 60
_PUMP_DRAIN_S = 5  # after a stopped child: how long its last output may take to come through the pipe


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class Run:
    """One planned capture: which interpreter, and where its traces and its Parquet file go."""

    interpreter: interpreters.Interpreter
    name: str
    run_dir: Path
    parquet: Path


PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder that holds tracekit/


def package_root() -> Path:
    """The folder holding the `tracekit` package: the checkout, or site-packages for a regular install."""
    return PACKAGE_ROOT


def child_env(root: str | Path | None = None) -> dict[str, str]:
    """The environment of a capture child: `root` (default: tracekit's parent folder) first on PYTHONPATH."""
    root = str(root or package_root())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@contextmanager
def capture_env() -> Iterator[dict[str, str]]:
    """`child_env()`, made safe for a non-editable install.

    From a source checkout or an editable install, tracekit's parent folder is the repository root. From a
    regular install it is this environment's site-packages, which must not land on another interpreter's
    path (its compiled packages would shadow the target's); the child then gets a temporary folder holding
    only links to the `tracekit` and `workloads` packages.
    """
    root = package_root()
    if root.name not in ("site-packages", "dist-packages"):
        yield child_env(root)
        return
    with tempfile.TemporaryDirectory(prefix="tracekit-path-") as tmp:
        for pkg in ("tracekit", "workloads"):
            os.symlink(root / pkg, Path(tmp) / pkg)
        yield child_env(tmp)


def interleaved(n_pythons: int, repeat: int) -> list[tuple[int, int]]:
    """(interpreter index, repeat number from 1) in run order: rounds alternate forward and backward
    (A B | B A | A B ...), so that a drift linear in time falls on every interpreter alike once the
    number of rounds is even (each forward-backward pair puts interpreter i at positions i and 2k-1-i)."""
    order = []
    for r in range(repeat):
        idx = range(n_pythons) if r % 2 == 0 else reversed(range(n_pythons))
        order += [(i, r + 1) for i in idx]
    return order


def plan_runs(
    workload: str,
    out: Path,
    pythons: Sequence[str | None],
    name: str | None,
    force: bool,
    repeat: int = 1,
) -> list[Run]:
    """Resolve interpreters and output paths, refusing (before anything runs) to overwrite without force.
    With `repeat` > 1 each interpreter runs `repeat` times, interleaved (`interleaved`), and run names end
    in the repeat number (py3.11-1, py3.11-2, ...), which `tracekit diff --by python` groups again."""
    if repeat < 1:
        raise CaptureError(f"--repeat {repeat}: give how many runs per interpreter, 1 or more")
    resolved = [interpreters.resolve(p) for p in (pythons or [None])]
    short = [interp.run_name for interp in resolved]
    # Two builds of one minor version (the system's 3.12.3 beside pyenv's 3.12.1) are named by their full
    # versions; two of the very same version cannot be told apart by name and are refused below.
    stems = [
        s.replace(".".join(i.version.split(".")[:2]), i.version, 1) if short.count(s) > 1 else s
        for s, i in zip(short, resolved)
    ]
    if name is not None:
        check_run_name(name, "--name")
    bases: list[str] = []
    for interp, stem in zip(resolved, stems):
        if name and len(resolved) == 1:
            base = name
        elif name:
            base = f"{name}-{stem}"
        else:
            base = stem
        if base in bases:
            other = resolved[bases.index(base)]
            raise CaptureError(
                f"two interpreters give the same run name {base!r} ({other.path} and {interp.path}); "
                "capture them one at a time with --name"
            )
        bases.append(base)
    runs: list[Run] = []
    for i, r in interleaved(len(resolved), repeat):
        run_name = bases[i] if repeat == 1 else f"{bases[i]}-{r}"
        run_dir = out / workload / run_name
        runs.append(Run(resolved[i], run_name, run_dir, out / workload / f"{run_name}.parquet"))
    for run in runs:
        check_run_name(run.name, "the run name")
        _check_run_folder(run.run_dir, force)
        check_output(run.parquet, force)
    return runs


def check_run_name(name: str, what: str) -> None:
    """A run name is one path component: it names OUT/<workload>/<name>/ and <name>.parquet, never a
    path (`--name ..` made the run folder OUT itself, which --force then emptied; `--name ../x` wrote
    outside OUT)."""
    seps = [sep for sep in (os.sep, os.altsep, "\0") if sep]
    bad = not name or any(sep in name for sep in seps)
    if bad or name.startswith("."):
        raise CaptureError(
            f"{what} {name!r}: a run name is one file name, not empty, without '/' and not starting with "
            "'.' (it names OUT/<workload>/<name>/ and <name>.parquet); e.g. --name baseline"
        )


def _check_run_folder(run_dir: Path, force: bool) -> None:
    """The run folder may be written: absent, empty, or (with --force) a folder whose traces tracekit
    replaces (the rest of what it holds is kept). Never a file, device or the like, even with --force."""
    if not os.path.lexists(run_dir):
        return
    if not run_dir.is_dir():
        raise OutputExistsError(
            f"{run_dir} exists and is not a folder; a run's traces go in a folder of that name: "
            "choose another --name, or move it"
        )
    if any(run_dir.iterdir()) and not force:
        raise OutputExistsError(f"{run_dir} exists; pass --force to replace its traces")


def check_knobs(workload: str | None, knobs: Mapping[str, object], device: str | None) -> None:
    """Check --set names and values here, before any interpreter starts (a script accepts extra keys)."""
    given = {k: str(v) for k, v in knobs.items()}
    dev = device or "cuda"
    try:
        if workload is None:
            own = {k: v for k, v in given.items() if k in {c.name for c in COMMON_KNOBS}}
            resolve_knobs(COMMON_KNOBS, own, dev, "--script")
        else:
            resolve_knobs(knobs_of(workload), given, dev, f"workload {workload}")
    except KnobError as exc:
        raise CaptureError(str(exc)) from None


def run_capture(
    workload: str | None,
    out: Path,
    *,
    pythons: Sequence[str | None] = (),
    device: str | None = None,
    knobs: Mapping[str, object] | None = None,
    schedule: str | Mapping[str, int] | None = None,
    name: str | None = None,
    script: Path | None = None,
    script_args: Sequence[str] = (),
    force: bool = False,
    echo: Echo = _stderr,
    summarize: Summarize | None = None,
    repeat: int = 1,
    parse: bool = True,
) -> list[Path]:
    """Capture `workload` (or `script`) in each interpreter, one after another; return the Parquet paths
    (the run folders when `parse` is False).

    `pythons`: paths, commands or versions ("3.9"); empty = the current interpreter. `device`: "cuda",
    "cpu" or None (cuda when the target's torch sees one). `knobs`: `--set` values. `schedule`: text
    ("wait=1,warmup=1,active=3,repeat=2") or a dict. `repeat`: runs per interpreter, interleaved
    (`interleaved`). Raises CaptureError when a workload fails (its traces so far, and every finished
    run, are kept), KeyboardInterrupt after the child stopped cleanly. `summarize(run_dir, capture)`:
    called with each run's parsed capture (`tracekit.api.capture` writes its TensorBoard event files).
    """
    if (workload is None) == (script is None):
        raise CaptureError("name one built-in workload, or pass --script train.py (not both)")
    if device not in (None, "cuda", "cpu"):
        raise CaptureError(f"--device {device}: choose cuda or cpu")
    knobs = dict(knobs or {})
    sched = _checked_schedule(schedule)
    if script is not None:
        script = Path(script)
        if not script.is_file():
            raise CaptureError(f"--script {script}: no such file")
    check_knobs(workload, knobs, device)
    label = workload if workload is not None else script.stem  # type: ignore[union-attr]
    check_run_name(label, "the workload name" if script is None else "--script's name")
    out = Path(out)
    _check_out_folder(out)
    runs = plan_runs(label, out, list(pythons) or [None], name, force, repeat)
    _check_interpreters(runs, repeat)
    if repeat > 1:
        _announce(runs, repeat, echo)
    # Everything is checked: the folders may be made; those made here go again unless a run is kept.
    with contextlib.ExitStack() as made:
        for run in runs:
            made.enter_context(new_folders_removed_on_failure(run.run_dir / MANIFEST_NAME))
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(out, exc) from None
        written: list[Path] = []
        for i, run in enumerate(runs, 1):
            echo(
                f"tracekit: [{i}/{len(runs)}] {label} under {run.interpreter.describe()} "
                f"(torch {run.interpreter.torch_version or '?'}) → {run.run_dir}"
            )
            try:
                manifest = _run_child(run, workload, script, script_args, device, knobs, sched, force, echo)
            except CaptureError as exc:
                if not written:
                    raise
                kept = ", ".join(p.stem if parse else p.name for p in written)
                raise CaptureError(f"{exc}; the {len(written)} finished runs are kept ({kept})") from None
            written.append(_parse_run(run, manifest, force, echo, summarize) if parse else run.run_dir)
        return written


def _checked_schedule(schedule: str | Mapping[str, int] | None) -> dict[str, int]:
    """The profiler schedule of `--schedule` text or a dict (keys over the default's), checked."""
    try:
        return parse_schedule(
            schedule
            if isinstance(schedule, str) or schedule is None
            else format_schedule({**parse_schedule(None), **dict(schedule)})
        )
    except KnobError as exc:
        raise CaptureError(str(exc)) from None


def _check_interpreters(runs: Sequence[Run], repeat: int) -> None:
    """torch installed in each interpreter; before several rounds, importable too (seconds each), so that
    a broken interpreter stops the capture before its first run rather than half-way through."""
    unique = list({run.interpreter.path: run.interpreter for run in runs}.values())
    for interp in unique:
        interpreters.require_torch(interp)  # the child reports a torch that fails to import
    if repeat > 1:
        with ThreadPoolExecutor(max_workers=len(unique)) as pool:  # seconds each: import them side by side
            for _ in pool.map(interpreters.check_torch, unique):
                pass


def _announce(runs: Sequence[Run], repeat: int, echo: Echo) -> None:
    """The run order, and whether `repeat` runs per interpreter can give a bounded interval in a diff."""
    need = runs_for_interval(DEFAULT_CONFIDENCE)
    echo(f"tracekit: {len(runs)} runs, interleaved: {' '.join(r.name for r in runs)}")
    if repeat < need:
        echo(
            f"tracekit: note: {repeat} runs per interpreter are too few for a bounded "
            f"{DEFAULT_CONFIDENCE:.0%} interval in `tracekit diff --by python` (it compares runs, and "
            f"needs at least {need} of each); use --repeat {need} or more"
        )
    if repeat % 2:
        echo(
            f"tracekit: note: an odd --repeat ({repeat}) leaves a linear drift of the machine "
            "uncancelled (the last round runs in one direction only); an even number cancels it"
        )


def _check_out_folder(out: Path) -> None:
    """-o names the folder the runs go into: refuse a file there (or above it) before a workload runs
    for minutes. The folder is made once everything else is checked."""
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"-o {out}: is a file; name a folder for the captures (it holds one per run)")
    check_parents(out / "run.parquet")  # the path leads through folders (or none yet), not through a file


def _child_command(
    run: Run,
    workload: str | None,
    script: Path | None,
    script_args: Sequence[str],
    device: str | None,
    knobs: Mapping[str, object],
    sched: dict[str, int],
    result: Path,
) -> list[str]:
    cmd = [str(run.interpreter.path), "-m", "tracekit.capture"]
    cmd += [workload] if workload is not None else ["--script", str(Path(script).resolve())]  # type: ignore[arg-type]
    cmd += ["-o", str(run.run_dir), "--schedule", format_schedule(sched), "--label", run.name]
    cmd += ["--result", str(result), "--force"]  # plan_runs already refused to overwrite without force
    if device:
        cmd += ["--device", device]
    for key, value in knobs.items():
        cmd += ["--set", f"{key}={_knob_text(value)}"]
    if workload is None and script_args:
        cmd += ["--", *script_args]
    return cmd


def forward_output(stream: Any, write: Callable[[str], Any] | None = None) -> None:
    """Copy a child's output to our stderr as it comes, less Kineto's `USDT ... profiler_start` lines
    (KINETO_USDT). A partial line is written at once (a progress bar's `\r` updates) unless it may
    still become such a line."""
    out = write or (lambda text: (sys.stderr.write(text), sys.stderr.flush()))
    held = b""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        held += chunk
        *lines, held = held.split(b"\n")
        text = b"".join(line + b"\n" for line in lines if not KINETO_USDT.match(line))
        if held and not (held.startswith(b"USDT:") or b"USDT:".startswith(held)):
            text, held = text + held, b""
        if text:
            out(text.decode("utf-8", "replace"))
    if held and not KINETO_USDT.match(held):
        out(held.decode("utf-8", "replace"))


def _knob_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _run_child(
    run: Run,
    workload: str | None,
    script: Path | None,
    script_args: Sequence[str],
    device: str | None,
    knobs: Mapping[str, object],
    sched: dict[str, int],
    force: bool,
    echo: Echo,
) -> dict:
    if force and run.run_dir.is_dir():
        _remove_own_files(run.run_dir)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tracekit-result-", suffix=".json")
    os.close(fd)
    result_path = Path(tmp)
    cmd = _child_command(run, workload, script, script_args, device, knobs, sched, result_path)
    try:
        # The child's stdout (a workload's own prints) and stderr go to stderr, through one pipe (their
        # order kept) that drops Kineto's start/stop lines: stdout carries only the results.
        with capture_env() as env:
            proc = pump = None
            try:
                with signals.held():  # a stop while it starts: raised once the child is known
                    proc = subprocess.Popen(
                        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
                    )
                pump = threading.Thread(target=forward_output, args=(proc.stdout,), daemon=True)
                pump.start()
                rc = proc.wait()
                pump.join()
            except KeyboardInterrupt:
                if proc is not None:
                    _stop_child(proc)
                if pump is not None:
                    pump.join(timeout=_PUMP_DRAIN_S)  # the child's last lines (its traces kept) before ours
                echo(f"tracekit: interrupted; traces written so far are kept in {run.run_dir}")
                raise
        try:
            result = json.loads(result_path.read_text() or "{}")
        except ValueError:
            result = {}
    finally:
        result_path.unlink(missing_ok=True)
    status = result.get("status")
    if rc == 130 or status == "interrupted":
        echo(f"tracekit: interrupted; traces written so far are kept in {run.run_dir}")
        raise KeyboardInterrupt
    where = run.interpreter.describe()
    if (status in ("ok", "incomplete") and rc == 0) or (status == "oom" and rc == EXIT_OOM):
        if status != "ok":  # an OOM is a result (the manifest's `oom`): the steps before it are parsed
            echo(f"tracekit: warning: {run.name}: {result.get('message')} ({where})")
        return result.get("manifest") or json.loads((run.run_dir / MANIFEST_NAME).read_text())
    message = result.get("message") or f"exit status {rc}, no message (see the output above)"
    if status == "crashed":
        raise CaptureError(
            f"{run.name}: the workload failed under {where}: {message.splitlines()[-1]} "
            f"(its traceback is above); traces written so far are kept in {run.run_dir} "
            f"(`tracekit parse {run.run_dir}` reads them)"
        )
    raise CaptureError(f"{run.name}: capture under {where} failed: {message}")


def _stop_child(proc: subprocess.Popen) -> None:
    """Stop the capture child as Ctrl-C stops it: it runs in a session of its own, so a stop signal
    (Ctrl-C at the terminal, or SIGINT, SIGTERM, SIGHUP sent to tracekit alone) reaches tracekit only,
    and is passed on as one SIGINT. The child then closes the profiler, keeping the traces of the steps
    that ran, and writes its manifest; a second stop, or a child that has not ended in
    _INTERRUPT_GRACE_S, kills it."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=_INTERRUPT_GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


def _remove_own_files(run_dir: Path) -> None:
    """What an earlier capture of this run wrote and a new one replaces: its TensorBoard event files
    (the child replaces its traces and manifest, `tracekit.capture.cli`). Nothing else is removed:
    tracekit never deletes what it did not write."""
    for path in event_files(run_dir):
        path.unlink(missing_ok=True)


def trace_files(run_dir: Path) -> list[Path]:
    """The trace files of a run folder (not manifest.json): tracekit's own, gzipped, and those an adopted
    profiler's handler wrote without gzip (tracekit.capture.adopt copies them under the same names)."""
    return sorted(
        p for p in Path(run_dir).iterdir() if p.name.endswith((TRACE_SUFFIX, TRACE_SUFFIX[: -len(".gz")]))
    )


def _parse_run(run: Run, manifest: dict, force: bool, echo: Echo, summarize: Summarize | None) -> Path:

    files = trace_files(run.run_dir)
    if not files:
        why = manifest.get("error") or "no profiler cycle completed"
        raise CaptureError(
            f"{run.run_dir}: the capture wrote no trace files ({why}); run more steps, or shorten "
            "--schedule (e.g. wait=0,warmup=1,active=1,repeat=1) and --set timing_steps=1"
        )
    capture = parse_paths([run.run_dir])  # the run folder: its traces (manifest.json is not one)
    capture.meta["manifest"] = manifest
    write_capture(capture, run.parquet, force=force)
    echo(f"tracekit: wrote {run.parquet} ({len(files)} trace files, {capture.table.num_rows} rows)")
    # TensorBoard event files (per-step scalars + the report) beside the traces, so `tracekit view OUT`
    # overlays runs at once. The capture is already safe on disk: a failure here only costs the summaries.
    if summarize is None:
        return run.parquet
    try:
        summarize(run.run_dir, capture)
    except TracekitError as exc:
        echo(f"tracekit: warning: no TensorBoard summaries for {run.run_dir}: {exc} (retry: tracekit tb)")
    return run.parquet
