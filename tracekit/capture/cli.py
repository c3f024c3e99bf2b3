"""`python -m tracekit.capture`: one capture inside the target interpreter (stdlib + torch, Python 3.9).

    python -m tracekit.capture WORKLOAD -o RUN_DIR [--device cuda|cpu] [--schedule wait=1,...]
                               [--set key=value]... [--label py3.11] [--force] [--result FILE]
    python -m tracekit.capture --script train.py -o RUN_DIR [...] [-- script args]
    python -m tracekit.capture --list [--json]

RUN_DIR becomes a TensorBoard logdir: `rank<r>.<time>.pt.trace.json.gz` per rank and profiler cycle, plus
manifest.json. With `--set nproc=N` the process relaunches itself under `torch.distributed.run` (one process
per device; nccl on CUDA, gloo on CPU) and merges the ranks' manifests.

Exit status: 0 done, 1 the workload or script raised (its traceback is on stderr; traces written so far
are kept), 2 bad arguments, 3 torch missing or the device unavailable, 4 out of device memory (a result,
not a crash: one line says where, the manifest's `oom` the figures; traces written so far are kept),
130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

from tracekit.capture import api, workers
from tracekit.capture.adopt import Adopter
from tracekit.capture.calibrate import calibrate_quietly
from tracekit.capture.environment import environment, utc_now
from tracekit.capture.knobs import (
    COMMON_KNOBS,
    KnobError,
    parse_assignments,
    parse_schedule,
    resolve_knobs,
)
from tracekit.capture.loader import window_warning
from tracekit.capture.memory import EXIT_OOM, is_out_of_memory, out_of_memory
from tracekit.capture.recorder import (
    MANIFEST_NAME,
    STOPPED,
    TRACE_SUFFIX,
    CaptureConfig,
    Session,
    manifest_doc,
    merge_rank_manifests,
    rank_manifest_name,
    write_json,
)
from tracekit.capture.workload import Context, describe, knobs_of, load

EXIT_CRASHED, EXIT_USAGE, EXIT_ENV, EXIT_INTERRUPTED = 1, 2, 3, 130
_LAUNCHED_ENV = "TRACEKIT_CAPTURE_LAUNCHED"


class CaptureFailure(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tracekit.capture", description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", help="built-in workload (see --list)")
    p.add_argument("-o", "--out", help="run directory to write (a TensorBoard logdir)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    p.add_argument("--schedule", help="profiler schedule, default wait=1,warmup=1,active=3,repeat=2")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--label", default="", help="run label shown in progress lines and the manifest")
    p.add_argument(
        "--script",
        help="capture this training script: its own torch.profiler.profile is adopted, or it marks its "
        "steps with tracekit.capture.session",
    )
    p.add_argument("--force", action="store_true", help="replace traces already in the run directory")
    p.add_argument("--result", help="write a JSON status document here (used by `tracekit capture`)")
    p.add_argument("--list", action="store_true", help="list workloads and knobs")
    p.add_argument("--json", action="store_true", help="with --list: as JSON")
    return p


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    if args.list:
        _print_list(args.json)
        return
    _interrupt_once()
    result: Dict[str, Any] = {"status": "error", "message": "", "run_dir": args.out}
    code = 0
    try:
        result.update(_capture(args, argv, script_args))
        code = {
            "ok": 0,
            "incomplete": 0,
            "oom": EXIT_OOM,
            "crashed": EXIT_CRASHED,
            "interrupted": EXIT_INTERRUPTED,
        }.get(result["status"], EXIT_CRASHED)
    except KnobError as exc:
        result["message"], code = str(exc), EXIT_USAGE
    except CaptureFailure as exc:
        result["message"], code = str(exc), exc.code
    except KeyboardInterrupt:
        result.update(status="interrupted", message="interrupted before the capture started")
        code = EXIT_INTERRUPTED
    if code and result.get("message") and result["status"] == "error" and not args.result:
        sys.stderr.write(f"tracekit.capture: error: {result['message']}\n")
    if args.result:
        write_json(args.result, result)
    sys.exit(code)


def _interrupt_once() -> None:
    """Ctrl-C stops the capture once: the first SIGINT raises KeyboardInterrupt (the profiler is closed,
    the steps that ran kept), later ones are ignored so that they cannot cut that clean-up short. A
    first one that Python loses (raised in a `__del__` or a callback: "Exception ignored") is recorded,
    and the session stops at its next step (recorder.STOPPED)."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # ignored (a background job), or a handler of the script's own

    def handler(signum: int, frame: Any) -> None:
        if STOPPED:
            return
        STOPPED.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)


def _print_list(as_json: bool) -> None:
    docs = describe()
    if as_json:
        print(json.dumps(docs, indent=2))
        return
    for doc in docs:
        print(f"{doc['name']}: {doc['summary']}")
        for k in doc["knobs"]:
            cpu = f" (cpu: {k['cpu_default']})" if k["cpu_default"] != k["default"] else ""
            print(f"  {k['name']}={k['default']}{cpu}  {k['help']}")
    print("every workload and --script also take:")
    for k in COMMON_KNOBS:
        print(f"  {k.name}={k.default}  {k.help}")


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise CaptureFailure(
            f"torch is not importable in {sys.executable} (Python {sys.version.split()[0]}): {exc}; "
            f"install it with `{sys.executable} -m pip install torch` "
            "(CPU-only: add --index-url https://download.pytorch.org/whl/cpu)",
            EXIT_ENV,
        ) from None
    return torch


def _cuda_torch() -> Any:
    torch = _import_torch()
    if not torch.cuda.is_available():
        raise CaptureFailure(
            f"--device cuda, but torch {torch.__version__} in {sys.executable} sees no CUDA device; "
            "use --device cpu or an interpreter with a CUDA build of torch",
            EXIT_ENV,
        )
    return torch


def _capture(args: argparse.Namespace, argv: List[str], script_args: List[str]) -> Dict[str, Any]:
    if bool(args.workload) == bool(args.script):
        raise KnobError("name one built-in WORKLOAD or pass --script train.py (not both)")
    if not args.out:
        raise KnobError("-o RUN_DIR is required")
    schedule = parse_schedule(args.schedule)
    given = parse_assignments(args.sets)
    torch = None
    device = args.device
    if device is None:
        torch = _import_torch()
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.script:
        script = os.path.abspath(args.script)
        if not os.path.isfile(script):
            raise KnobError(f"--script {args.script}: no such file")
        own = {k: v for k, v in given.items() if k in {c.name for c in COMMON_KNOBS}}
        knobs = resolve_knobs(COMMON_KNOBS, own, device, "--script")
        knobs.update({k: v for k, v in given.items() if k not in own})
        name = os.path.splitext(os.path.basename(script))[0]
    else:
        name = args.workload
        knobs = resolve_knobs(knobs_of(name), given, device, f"workload {name}")
        script = None
    nproc = int(knobs.get("nproc", 1))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    launched = os.environ.get(_LAUNCHED_ENV) == "1"
    if device == "cuda" and not launched:
        _cuda_torch()  # before any earlier trace is replaced
    if not launched:
        _prepare_out(args.out, args.force)
    if nproc > 1 and not launched:
        # A CPU launcher does not import torch: torchrun and its ranks do (seconds each on a small box).
        if device == "cuda" and nproc > _cuda_torch().cuda.device_count():
            raise CaptureFailure(
                f"--set nproc={nproc}, but only {_cuda_torch().cuda.device_count()} CUDA devices are visible",
                EXIT_ENV,
            )
        return _launch_ranks(args, argv, nproc, script_args)
    torch = _cuda_torch() if device == "cuda" else (torch or _import_torch())
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    config = CaptureConfig(
        out_dir=os.path.abspath(args.out),
        workload=name,
        device=device,
        schedule=schedule,
        knobs=knobs,
        knobs_set=given,
        label=args.label,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        script={"path": script, "args": script_args} if script else None,
    )
    return _run(config, torch)


def _prepare_out(out: str, force: bool) -> None:
    """Refuse to mix a new capture into old traces; with --force remove what an earlier capture wrote."""
    ours = glob.glob(os.path.join(out, "*" + TRACE_SUFFIX)) + glob.glob(os.path.join(out, MANIFEST_NAME))
    ours += glob.glob(os.path.join(out, "rank*.pt.trace.json"))
    ours += glob.glob(os.path.join(out, ".manifest.rank*.json"))
    if ours and not force:
        raise KnobError(f"{out} already holds a capture; pass --force to replace it")
    for path in ours:
        os.remove(path)
    os.makedirs(out, exist_ok=True)


def _run(config: CaptureConfig, torch: Any) -> Dict[str, Any]:
    """Run one process's capture and write its manifest (its rank part when there are several)."""
    dist: Any = None
    # A script under `--set nproc=N` initialises its own process group (as it would under torchrun).
    if config.world_size > 1 and config.script is None:
        import torch.distributed as dist

        if config.device == "cuda":
            torch.cuda.set_device(config.local_rank)
        dist.init_process_group(backend="nccl" if config.device == "cuda" else "gloo")
    config.calibration["before"] = calibrate_quietly(config.device)
    torch.manual_seed(int(config.knobs.get("seed", 0)) + config.rank)
    sess = Session(config)
    origin_ns = time.perf_counter_ns()
    log_dir = tempfile.mkdtemp(prefix="tracekit-loader-")
    workers.install(log_dir)  # every DataLoader worker times the batches it makes
    adopter = None
    if config.script is not None:  # a script's own torch.profiler.profile, adopted (tracekit.capture.adopt)
        adopter = Adopter(config.out_dir, config.device, config.rank, sess.stream)
        adopter.install()
        sess.adopter = adopter
    started_at = utc_now()
    status, error = "ok", None
    try:
        if config.script is not None:
            _run_script(config, sess, adopter)
        else:
            ctx = Context(
                config.device, config.knobs, config.rank, config.world_size, config.local_rank, session=sess
            )
            runner = load(config.workload).build(ctx)
            config.samples_per_step = getattr(runner, "samples_per_step", None)
            config.extra = dict(getattr(runner, "manifest_extra", None) or {})
            with sess:
                while not sess.done:
                    runner.step()
                    sess.step()
    except KnobError:  # a setting the workload cannot use, or a script that never marked a step
        sess.close(None)
        if adopter is not None:
            adopter.close(None)
            adopter.uninstall()
        workers.uninstall()
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    except KeyboardInterrupt:
        sess.close(KeyboardInterrupt())
        _keep_adopted(adopter, KeyboardInterrupt())
        status, error = "interrupted", f"interrupted at step {_steps_run(sess, adopter) + 1}"
        sys.stderr.write(f"tracekit.capture: {error}; traces written so far are kept in {config.out_dir}\n")
    except BaseException as exc:
        status, error = _ended_by(exc, config, sess, adopter)
    finally:
        if adopter is not None:
            adopter.uninstall()
    if status != "interrupted":
        config.calibration["after"] = calibrate_quietly(config.device)
    facts = workers.loader_facts(log_dir, origin_ns)
    workers.uninstall()
    shutil.rmtree(log_dir, ignore_errors=True)
    if STOPPED and status == "ok":  # a Ctrl-C Python lost: the user asked to stop
        status, error = "interrupted", f"interrupted at step {_steps_run(sess, adopter)}"
    manifest = _manifest(config, sess, adopter, facts, started_at, status, error)
    status, error = manifest["status"], manifest["error"]
    name = MANIFEST_NAME if config.world_size == 1 else rank_manifest_name(config.rank)
    write_json(os.path.join(config.out_dir, name), manifest)
    if dist is not None and dist.is_initialized():
        if status == "ok":
            dist.barrier()
        dist.destroy_process_group()
    return {"status": status, "message": error or "", "manifest": manifest}


def _ended_by(
    exc: BaseException, config: CaptureConfig, sess: Session, adopter: Optional[Adopter]
) -> Tuple[str, str]:
    """(status, error) of a loop ended by an exception, its traces kept: out of device memory is a result
    ("oom": where, how full), anything else the workload's own error, shown ("crashed")."""
    if config.device == "cuda" and is_out_of_memory(exc):
        sess.oom = out_of_memory(
            exc, _step_label(sess, adopter), (sess.env.get("device") or {}).get("total_memory_bytes")
        )
    sess.close(exc)
    _keep_adopted(adopter, exc)
    if sess.oom is not None:
        error = sess.oom["message"]
        sys.stderr.write(f"tracekit.capture: {error}; traces written so far are kept in {config.out_dir}\n")
        return "oom", error
    error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    traceback.print_exc()
    sys.stderr.write(
        f"tracekit.capture: {config.workload} raised at step {_steps_run(sess, adopter) + 1}; "
        f"traces written so far are kept in {config.out_dir}\n"
    )
    return "crashed", error


def _steps_run(sess: Session, adopter: Optional[Adopter]) -> int:
    """The steps the loop finished: the session's, or the adopted profiler's prof.step() calls."""
    return adopter.step_calls if adopter is not None and adopter.adopted else sess.index


def _step_label(sess: Session, adopter: Optional[Adopter]) -> str:
    """The step in progress as an OOM message names it: the session's, or the adopted profiler's."""
    if adopter is not None and adopter.adopted:
        return f"step {adopter.step_calls + 1} of the script's loop"
    return sess.step_label()


def _keep_adopted(adopter: Optional[Adopter], exc: BaseException) -> None:
    """After the script raised: stop its profiler keeping the cycle in progress, copy what was written."""
    if adopter is None or not adopter.adopted:
        return
    adopter.close(exc)
    with contextlib.suppress(KnobError):  # nothing to keep: the message is the crash's
        adopter.collect_traces()


def _manifest(
    config: CaptureConfig,
    sess: Session,
    adopter: Optional[Adopter],
    facts: Dict[str, Any],
    started_at: str,
    status: str,
    error: Optional[str],
) -> Dict[str, Any]:
    """This process's manifest: the session's, or that of the script's adopted profiler."""
    if adopter is not None and adopter.adopted:
        return _adopted_manifest(config, adopter, facts, started_at, status, error, sess.oom)
    if status == "ok" and sess.index < sess.n_total:
        status = "incomplete"
        error = f"the loop ended after {sess.index} of {sess.n_total} steps"
    sess.loader_facts = facts
    return sess.manifest(status, error)


def _adopted_manifest(
    config: CaptureConfig,
    adopter: Adopter,
    facts: Dict[str, Any],
    started_at: str,
    status: str,
    error: Optional[str],
    oom: Optional[Dict[str, Any]],
) -> Dict[str, Any]:
    """The manifest of a script whose own profiler was adopted: the schedule it ran, its steps."""
    sched, how = adopter.schedule()
    config.schedule = sched
    rec = adopter.rank_record(status, error, facts)
    rec["oom"] = oom
    manifest = manifest_doc(config, rec, environment(config.device), started_at, status, error)
    manifest["adopted"] = {
        **adopter.settings(),
        "schedule_source": how,
        "traces": [{"path": p, "time_ns": t} for p, _, t in adopter.exports],
        "exported_by_tracekit": [os.path.basename(p) for p in adopter.exported_by_tracekit],
        "unprofiled_steps": len(rec["unprofiled"]["step_ms"]),
    }
    if config.rank == 0:
        adopter.stream.write(f"tracekit.capture: {adopter.summary_line(rec)}\n")
        warning = window_warning(sched, rec["loader"])
        if warning:
            adopter.stream.write(f"tracekit.capture: warning: {warning}\n")
        adopter.stream.flush()
    return manifest


def _run_script(config: CaptureConfig, sess: Session, adopter: Optional[Adopter]) -> None:
    script = config.script or {}
    path = script["path"]
    api._pending, api._taken = sess, None
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [path] + list(script["args"])
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        taken, api._pending, api._taken = api._taken, None, None
    adopted = adopter is not None and adopter.adopted
    if taken is not None and adopted:
        raise KnobError(
            f"{path} both marks its steps with tracekit.capture.session()/steps() and runs its own "
            "torch.profiler.profile; keep one (tracekit's session starts the profiler itself)"
        )
    if taken is None and not adopted:
        raise KnobError(
            f"{path} neither started a torch.profiler.profile nor called tracekit.capture.session() or "
            "steps(): nothing marks its steps; profile its loop with torch.profiler.profile(...) and "
            "prof.step(), or mark the steps as docs/capture.md shows"
        )
    if adopted:
        assert adopter is not None
        adopter.close(None)  # a profiler the script left running
        adopter.collect_traces()
        return
    sess.close(None if sess.done else RuntimeError("loop ended early"))


def _launch_ranks(
    args: argparse.Namespace, argv: List[str], nproc: int, script_args: Optional[List[str]] = None
) -> Dict[str, Any]:
    """Start one process per rank through torch.distributed.run (torchrun) and merge their manifests;
    each rank gets the script's own arguments (`script_args`, after `--`)."""
    forwarded: List[str] = []
    skip = False
    for tok in argv:  # the ranks must not write the launcher's --result document
        if skip:
            skip = False
        elif tok == "--result":
            skip = True
        elif not tok.startswith("--result="):
            forwarded.append(tok)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1"]
    cmd += [f"--nproc_per_node={nproc}", "-m", "tracekit.capture", *forwarded]
    if script_args:
        cmd += ["--", *script_args]
    env = dict(os.environ)
    env[_LAUNCHED_ENV] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun picks anyway, without its banner
    sys.stderr.write(f"tracekit.capture: starting {nproc} ranks with torch.distributed.run\n")
    sys.stderr.flush()
    proc = subprocess.Popen(cmd, env=env)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        # This process is its own session's leader (`tracekit capture` starts it so): the stop reached
        # it alone. torchrun passes SIGINT on to its ranks, which close their profilers.
        proc.send_signal(signal.SIGINT)
        rc = proc.wait()
    out = os.path.abspath(args.out)
    parts = []
    for rank in range(nproc):
        path = os.path.join(out, rank_manifest_name(rank))
        if os.path.exists(path):
            with open(path) as fh:
                parts.append(json.load(fh))
    if not parts:
        raise CaptureFailure(
            f"torch.distributed.run exited with status {rc} before any rank wrote its manifest "
            "(its messages are above)",
            EXIT_CRASHED,
        )
    manifest = merge_rank_manifests(parts)
    missing = sorted(set(range(nproc)) - {r["rank"] for r in manifest["ranks"]})
    if missing:
        manifest["status"] = "crashed" if manifest["status"] == "ok" else manifest["status"]
        note = f"ranks {missing} wrote no manifest (stopped by torch.distributed.run, status {rc})"
        manifest["error"] = "\n".join(x for x in (manifest["error"], note) if x)
    if rc != 0 and manifest["status"] == "ok":
        manifest["status"] = "crashed"
        manifest["error"] = f"torch.distributed.run exited with status {rc}"
    write_json(os.path.join(out, MANIFEST_NAME), manifest)
    for rank in range(nproc):
        path = os.path.join(out, rank_manifest_name(rank))
        if os.path.exists(path):
            os.remove(path)
    return {"status": manifest["status"], "message": manifest["error"] or "", "manifest": manifest}
