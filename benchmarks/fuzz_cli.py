"""Fuzz the CLI as a sceptical user would: random mutations of real traces and captures, random option
values, signals at random times; check tracekit's three promises on every case:

1. no traceback: every command ends with exit 0, or 2 and one `tracekit: error:` line (a usage error
   of the option parser may take its usual few lines), or 128+N / 130 when stopped by a signal;
2. no wrong number without a warning: `analyze --check` holds its invariants, and every number in a
   JSON result is finite, and every time in it (a key ending in `_ns`/`_ms`/`_us`, not a change) is >= 0;
3. no partial or damaged output: the output folder holds the complete output or what was there
   before, never a temporary file; a capture written reads back; no worker process outlives the run.

    python benchmarks/fuzz_cli.py --cases 500 --seed 1        # the long run, by hand
    tests/test_fuzz_cli.py runs a bounded number of cases with a fixed seed in CI.

Each case is reproducible from (seed, case number); a finding prints both, the command and the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import decimal
import functools
import gzip
import io
import json
import math
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    ROOT / "fixtures/h200_probe/tiny.pt.trace.json.gz",
    ROOT / "fixtures/h200_probe/sync.pt.trace.json.gz",
    ROOT / "fixtures/hta/sampled_rank-0.json.gz",
]
ODD_VALUES = [
    None,
    -1,
    0,
    -(10**18),
    2**31,
    2**33,
    2**63,
    1e308,
    -1e-300,
    "",
    "x",
    "0x1f",
    "1e3",
    [],
    {},
    [[[]]],
    True,
]
FIELDS = ["ts", "dur", "name", "cat", "ph", "pid", "tid", "args"]
ARG_FIELDS = ["device", "stream", "correlation", "External id"]
TIME_KEY = re.compile(r"(_ns|_ms|_us|ms_per_step)$")
TIMESTAMP = re.compile(r"start|^ts|_ts|end_ns")  # instants, as the trace wrote them (may be < 0)
SIGNED = re.compile(r"change|delta|diff|lag|ratio|shift|saving|overhead|error|low|high|slack", re.I)


@dataclass
class Finding:
    case: int
    argv: list
    reason: str

    def __str__(self) -> str:
        return f"case {self.case}: {' '.join(map(str, self.argv))}\n    {self.reason}"


# --- inputs ------------------------------------------------------------------------------------------


def load_trace(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def mutate_trace(doc: dict, rng: random.Random) -> tuple[dict, str]:
    """One to three random edits of a real trace: a field set to an odd value or deleted, events
    copied, dropped or shuffled, step names changed, the rank changed."""
    doc = json.loads(json.dumps(doc))
    events = doc["traceEvents"]
    done = []
    for _ in range(rng.randint(1, 3)):
        what = rng.choice(["value", "delete", "args", "copy", "drop_cat", "shuffle", "steps", "rank"])
        if what in ("value", "delete", "args") and events:
            for ev in rng.sample(events, min(len(events), rng.choice([1, 3, 50]))):
                if not isinstance(ev, dict):
                    continue
                if what == "args" and isinstance(ev.get("args"), dict):
                    ev["args"][rng.choice(ARG_FIELDS)] = rng.choice(ODD_VALUES)
                elif what == "delete":
                    ev.pop(rng.choice(FIELDS), None)
                else:
                    ev[rng.choice(FIELDS)] = rng.choice(ODD_VALUES)
        elif what == "copy" and events:
            a = rng.randrange(len(events))
            events.extend(events[a : a + rng.choice([1, 10, len(events)])])
        elif what == "drop_cat":
            cat = rng.choice(["kernel", "cpu_op", "cuda_runtime", "user_annotation", "ac2g"])
            events[:] = [e for e in events if not (isinstance(e, dict) and e.get("cat") == cat)]
        elif what == "shuffle":
            rng.shuffle(events)
        elif what == "steps":
            name = rng.choice(["ProfilerStep#5", "ProfilerStep#-1", "ProfilerStep#99999999999999999999", ""])
            for ev in events:
                if isinstance(ev, dict) and str(ev.get("name", "")).startswith("ProfilerStep"):
                    ev["name"] = name if rng.random() < 0.7 else ev["name"]
                    if rng.random() < 0.2:
                        ev["dur"] = -abs(ev.get("dur") or 1)
        elif what == "rank":
            doc["distributedInfo"] = {"rank": rng.choice(ODD_VALUES), "world_size": 1}
        done.append(what)
    return doc, "+".join(done)


def write_trace(doc: dict, path: Path, rng: random.Random) -> str:
    """The trace as JSON (or gzip), sometimes cut short or with bytes flipped."""
    data = json.dumps(doc).encode()
    how = rng.choice(["plain", "plain", "gzip", "cut", "flip"])
    if how == "cut":
        data = data[: rng.randrange(len(data))]
    elif how == "flip":
        data = bytearray(data)
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    if how == "gzip":
        path = path.with_suffix(".json.gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return how


def mutate_capture(capture: Path, out: Path, rng: random.Random) -> str:
    """A copy of a real capture with one damage: a column dropped or retyped, the metadata edited, the
    file cut or flipped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    what = rng.choice(["drop", "retype", "meta", "cut", "flip", "none"])
    if what in ("cut", "flip", "none"):
        data = bytearray(capture.read_bytes())
        if what == "cut":
            data = data[: rng.randrange(len(data))]
        elif what == "flip":
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        out.write_bytes(bytes(data))
        return what
    table = pq.read_table(capture)
    meta = json.loads(pq.read_metadata(capture).metadata[b"tracekit"])
    if what == "drop":
        table = table.drop([rng.choice(table.column_names)])
    elif what == "retype":
        i = rng.randrange(table.num_columns)
        col = table.column(i)
        with contextlib.suppress(pa.ArrowException):
            table = table.set_column(i, pa.field(table.column_names[i], pa.string()), col.cast(pa.string()))
    else:
        key = rng.choice(["traces", "sources", "schema_version", "manifest", "analysis"])
        meta[key] = rng.choice(ODD_VALUES)
    pq.write_table(table.replace_schema_metadata({b"tracekit": json.dumps(meta).encode()}), out)
    return what


# --- commands ----------------------------------------------------------------------------------------


def odd_number(rng: random.Random) -> str:
    return rng.choice(["0", "1", "0.5", "-1", "1e6", "1e7", "1e-7", "1e308", "inf", "nan", "-0", "abc", "3"])


def random_argv(rng: random.Random, inp: Path, work: Path) -> tuple[list, Path | None]:
    """A command over `inp` with random options; the output path it names (or None)."""
    command = rng.choice(["analyze", "analyze", "whatif", "whatif", "memory", "info", "parse", "diff"])
    out_choices = [work / "out.txt", work / "out.json", work / "sub", inp, work / "blocker" / "x.txt"]
    argv: list = [command, str(inp)]
    out = None
    if command == "parse":
        out = rng.choice([work / "c.parquet", work / "cdir", inp, work / "blocker" / "c.parquet"])
        argv += ["-o", str(out) + ("/" if out.name == "cdir" else "")]
    elif command == "diff":
        argv += [str(inp)] + rng.choice([[], ["--top-ops", odd_number(rng)], ["--compare", "nothing"]])
    elif command == "whatif":
        cause = rng.choice(["launch", "interpreter", "framework", "dataloader", "sync", "bogus"])
        argv += rng.choice(
            [
                ["--set", f"{cause}={odd_number(rng)}"],
                ["--kernels", rng.choice([".", "(", "gemm", ""]) + "=" + odd_number(rng)],
                ["--python-speedup", odd_number(rng)],
                ["--rank-host", f"{rng.choice(['0', '7', 'x'])}={odd_number(rng)}"],
                ["--trace", str(rng.choice(out_choices))],
                ["--channels-last"],
                ["--autocast", rng.choice(["bf16", "fp16", "FP16", "fp8", "", "bf16 "])],
                ["--channels-last", "--autocast", "bf16", "--cuda-graphs"],
            ]
        )
    elif command == "memory":
        argv += rng.choice(
            [
                [],
                ["--batch-scale", odd_number(rng)],
                ["--amp", rng.choice(["bf16", "fp16", "fp8", ""])],
                ["--grad-accum", odd_number(rng)],
                ["--checkpoint", odd_number(rng)],
                ["--checkpoint-modules", rng.choice(["(", "^Linear_", ""])],
                ["--fit-gib", odd_number(rng)],
                ["--step", rng.choice(["ProfilerStep", "(", ""])],
            ]
        )
    elif command == "analyze":
        argv += rng.choice(
            [["--check", "--json"], ["--sync-tolerance-us", odd_number(rng)], ["--width", odd_number(rng)]]
        )
    if command != "parse" and rng.random() < 0.3:
        out = rng.choice(out_choices)
        argv += ["-o", str(out)]
    if rng.random() < 0.3:
        argv.append("--force")
    if "--trace" in argv:
        out = Path(argv[argv.index("--trace") + 1])
    return argv, out


def run_in_process(argv: list) -> tuple[int, str, str, BaseException | None]:
    """tracekit ARGV through its main(): (exit code, stdout, stderr, an exception that escaped)."""
    from tracekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = None
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # noqa: BLE001 - a traceback is the finding
            escaped = exc
            code = -1
    return code, out.getvalue(), err.getvalue(), escaped


# --- the three promises ------------------------------------------------------------------------------


def check_exit(code: int, err: str, escaped: BaseException | None) -> str | None:
    if escaped is not None:
        return f"traceback: {type(escaped).__name__}: {str(escaped)[:300]}"
    if "Traceback (most recent call last)" in err:
        return "a traceback on stderr: " + err.strip().splitlines()[-1][:300]
    if code not in (0, 2):
        return f"exit {code}: {err.strip()[-300:]}"
    if code == 2 and "Error:" not in err:  # Typer's usage errors are a few lines with "Error:"
        lines = [line for line in err.splitlines() if line.startswith("tracekit: error:")]
        if len(lines) != 1:
            return f"exit 2 without one 'tracekit: error:' line: {err.strip()[-300:]}"
    return None


def check_numbers(doc, path: str = "") -> str | None:
    """Every number finite; every time (not a change) >= 0."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            bad = check_numbers(v, f"{path}.{k}")
            if bad:
                return bad
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            bad = check_numbers(v, f"{path}[{i}]")
            if bad:
                return bad
    elif isinstance(doc, float) and not math.isfinite(doc):
        return f"{path} = {doc}"
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool) and doc < 0:
        key = path.rsplit(".", 1)[-1]
        if TIME_KEY.search(key) and not SIGNED.search(path) and not TIMESTAMP.search(key):
            return f"{path} = {doc} (a negative time)"
    return None


def check_result(argv: list, code: int, out: str, err: str) -> str | None:
    if code != 0:
        return None
    if "--check" in argv and "ok:" not in err:
        return "analyze --check printed no 'ok:'"
    if "--json" in argv and "-o" not in argv:
        try:
            doc = json.loads(out)
        except ValueError:
            return "--json printed something that is not JSON"
        bad = check_numbers(doc)
        if bad:
            warned = "warning" in err
            return f"a wrong number{' (with a warning)' if warned else ' without a warning'}: {bad}"
    return None


def check_outputs(work: Path, before: dict, out: Path | None, code: int) -> str | None:
    """No temporary file left; an output that changed is complete (a capture reads back)."""
    left = [p.name for p in work.rglob(".*")]
    if left:
        return f"left behind: {left}"
    if out is None or not out.exists() or before.get(out) == _stamp(out):
        return None
    if code != 0:
        return f"{out} changed although the command failed (exit {code})"
    if out.suffix == ".parquet" or out.is_dir():
        from tracekit.data.store import read_capture
        from tracekit.errors import TracekitError

        try:
            read_capture(out)
        except TracekitError as exc:
            return f"the capture written does not read back: {exc}"
    elif out.stat().st_size == 0:
        return f"{out} is empty"
    return None


def _stamp(path: Path):
    if path.is_dir():
        return tuple(sorted((p.name, p.stat().st_mtime_ns) for p in path.rglob("*")))
    return (path.stat().st_size, path.stat().st_mtime_ns)


# --- cases -------------------------------------------------------------------------------------------


def prepare(work: Path) -> dict:
    """The real inputs every case starts from: the source traces, and a capture of the first."""
    from tracekit.parse.parser import parse_to_file

    base = {"traces": [load_trace(p) for p in SOURCES]}
    base["capture"] = work / "base.parquet"
    parse_to_file([SOURCES[0]], base["capture"])
    return base


def run_case(case: int, seed: int, base: dict, root: Path) -> list[Finding]:
    rng = random.Random(f"{seed}-{case}")
    work = root / f"case{case}"
    work.mkdir()
    (work / "blocker").write_bytes(b"a file where a folder is expected")
    (work / "out.txt").write_text("an existing file\n")
    if rng.random() < HOSTILE_SHARE:
        findings = hostile_case(case, rng, base, work)
        shutil.rmtree(work, ignore_errors=True)
        return findings
    if rng.random() < 0.6:
        doc, how = mutate_trace(rng.choice(base["traces"]), rng)
        inp = work / "t.pt.trace.json"
        how += "/" + write_trace(doc, inp, rng)
        inp = inp if inp.exists() else inp.with_suffix(".json.gz")
    else:
        inp = work / "c.parquet"
        how = "capture:" + mutate_capture(base["capture"], inp, rng)
    argv, out = random_argv(rng, inp, work)
    before = {p: _stamp(p) for p in [out, inp] if p is not None and p.exists()}
    code, stdout, stderr, escaped = run_in_process(argv)
    findings = []
    for reason in (
        check_exit(code, stderr, escaped),
        check_result(argv, code, stdout, stderr),
        check_outputs(work, before, out, code),
    ):
        if reason:
            findings.append(Finding(case, argv, f"[{how}] {reason}"))
    shutil.rmtree(work, ignore_errors=True)
    return findings


# --- the hostile classes (issue 41): links, devices, FIFOs, names with `..` and commas, pooled duplicates,
# mixed runs, corrupted durations, B/E events. Each knows what the command must do.

HOSTILE_SHARE = 0.4  # of the in-process cases
HOSTILE = (
    "link_input",
    "fifo_input",
    "comma_name",
    "run_name",
    "odd_output",
    "pooled_duplicate",
    "mixed_runs",
    "corrupt_duration",
    "begin_end",
)
IMPOSSIBLE_US = [3.6e9, 2.0**31, 1e10, 86400e6]  # an hour, 2^31 µs, ~3 h, a day
RUN_NAMES = ["..", ".", "../../escaped", "a/b", "", ".hidden", "x/.."]


def hostile_case(case: int, rng: random.Random, base: dict, work: Path) -> list[Finding]:
    what = rng.choice(HOSTILE)
    doc = rng.choice(base["traces"])
    trace = work / "t.pt.trace.json"
    trace.write_text(json.dumps(doc))
    found = globals()[f"_case_{what}"](rng, doc, trace, base, work)
    return [Finding(case, argv, f"[{what}] {reason}") for argv, reason in found]


def _run_checked(
    argv: list, *, want: int | None = None, needle: str = ""
) -> tuple[list, str | None, str, str]:
    """argv run in process; (argv, the first broken promise or None, stdout, stderr). `want`: the exit
    status the case requires (None: 0 or 2); `needle`: text its error line must hold."""
    code, out, err, escaped = run_in_process(argv)
    reason = check_exit(code, err, escaped) or check_result(argv, code, out, err)
    if reason is None and want is not None and code != want:
        reason = f"exit {code}, expected {want}: {err.strip()[-300:]}"
    if reason is None and needle and code != 0 and needle not in err:
        reason = f"the error does not say {needle!r}: {err.strip()[-300:]}"
    return argv, reason, out, err


def _case_link_input(rng, doc, trace, base, work):
    link = work / "link.pt.trace.json"
    dangling = work / "gone.pt.trace.json"
    dangling.symlink_to(work / "nowhere.json")
    command = rng.choice(["analyze", "info", "whatif"])
    if rng.random() < 0.5:
        link.symlink_to(trace)
        argv, reason, _, _ = _run_checked([command, link])
        return [(argv, reason)] if reason else []
    argv, reason, _, _ = _run_checked([command, dangling], want=2, needle="does not exist")
    return [(argv, reason)] if reason else []


def _case_fifo_input(rng, doc, trace, base, work):
    """A FIFO input must be refused at once (one without a writer used to hang forever)."""
    fifo = work / rng.choice(["pipe.pt.trace.json", "pipe"])
    os.mkfifo(fifo)
    command = rng.choice([["analyze"], ["info"], ["whatif"], ["parse", "-o", str(work / "c.parquet")]])
    argv = [sys.executable, "-m", "tracekit", command[0], str(fifo), *command[1:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        return [(argv, "no exit within 60 s (a FIFO input must be refused up front)")]
    reason = check_exit(run.returncode, run.stderr, None)
    if reason is None and (run.returncode != 2 or "FIFO" not in run.stderr):
        reason = f"exit {run.returncode}, expected 2 naming the FIFO: {run.stderr.strip()[-300:]}"
    return [(argv, reason)] if reason else []


def _case_comma_name(rng, doc, trace, base, work):
    """A name holding a comma is one path (diff used to split it: "my: no such file")."""
    comma = work / rng.choice(["my,run.pt.trace.json", "a,b,c.pt.trace.json"])
    shutil.copy(trace, comma)
    argv, reason, _, _ = _run_checked(["diff", comma, trace], want=0)
    return [(argv, reason)] if reason else []


def _case_run_name(rng, doc, trace, base, work):
    """`capture --name` that is not one path component: refused before anything runs or changes."""
    runs = work / "runs"
    (runs / "other").mkdir(parents=True)
    (runs / "mine.txt").write_text("keep")
    before = _tree(work)
    argv = ["capture", "heavy_mlp", "--device", "cpu", "-o", runs, "--name", rng.choice(RUN_NAMES)]
    argv += ["--force"] if rng.random() < 0.5 else []
    argv, reason, _, _ = _run_checked(argv, want=2, needle="a run name is one file name")
    if reason is None and _tree(work) != before:
        reason = f"the output folder changed: {sorted(set(_tree(work)) ^ set(before))}"
    return [(argv, reason)] if reason else []


def _case_odd_output(rng, doc, trace, base, work):
    """-o onto a link (written through), a dangling link, a FIFO or a device (never replaced), or a path
    through `..`; with or without --force."""
    kind = rng.choice(["link", "dangling", "fifo", "device", "dotdot"])
    out = work / "o.txt"
    if kind == "link":
        out.symlink_to(work / "out.txt")
    elif kind == "dangling":
        out.symlink_to(work / "made.txt")
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "device":
        try:
            os.mknod(out, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a null device of our own
        except (PermissionError, AttributeError):
            kind = "fifo"
            os.mkfifo(out)
    else:
        (work / "sub").mkdir()
        out = work / "sub" / ".." / "out.txt"
    command = rng.choice(
        [["analyze", base["capture"], "--no-savings", "-o", out], ["whatif", base["capture"], "--trace", out]]
    )
    argv = command + (["--force"] if rng.random() < 0.5 else [])
    special = kind in ("fifo", "device")
    argv, reason, _, _ = _run_checked(argv, want=2 if special else None)
    if reason is None:
        mode = os.lstat(out).st_mode
        if special and not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            reason = f"the {kind} was replaced"
        elif kind in ("link", "dangling") and not stat.S_ISLNK(mode):
            reason = "the link was replaced by a file"
    if reason is None:
        reason = check_outputs(work, {}, None, 0)
    return [(argv, reason)] if reason else []


def _case_pooled_duplicate(rng, doc, trace, base, work):
    """One run twice in a pooled side of diff (by its path, another spelling, or a copy)."""
    cap = base["capture"]
    copy = work / "copy.parquet"
    shutil.copy(cap, copy)
    twice = rng.choice(
        [f"{cap},{cap}", f"{cap},{cap},{cap},{cap}", f"{cap},{copy}", f"{trace},{work}/./t.pt.trace.json"]
    )
    argv, reason, _, _ = _run_checked(["diff", twice, trace], want=2, needle="in one side")
    return [(argv, reason)] if reason else []


def _case_mixed_runs(rng, doc, trace, base, work):
    """A run folder holding two runs of one rank (another process, 38 s later): refused."""
    run = work / "run"
    run.mkdir()
    shutil.copy(trace, run / "a.pt.trace.json")
    pids = {e.get("pid") for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "cpu_op"}
    other = json.loads(json.dumps(doc))
    for e in other["traceEvents"]:
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
            e["ts"] += 38e6
        if isinstance(e, dict) and e.get("pid") in pids:
            e["pid"] = 987654
    (run / "b.pt.trace.json").write_text(json.dumps(other))
    command = rng.choice([["analyze", run], ["whatif", run], ["parse", run, "-o", work / "c.parquet"]])
    argv, reason, _, _ = _run_checked(command, want=2, needle="different processes")
    return [(argv, reason)] if reason else []


def _case_corrupt_duration(rng, doc, trace, base, work):
    """One duration set to hours: named, left out, never a figure."""
    doc = json.loads(json.dumps(doc))
    cats = rng.choice([("user_annotation",), ("kernel",), ("cpu_op",)])
    victims = [
        e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in cats and e.get("ph") == "X"
    ]
    if not victims:
        return []
    us = rng.choice(IMPOSSIBLE_US)
    rng.choice(victims)["dur"] = us
    trace.write_text(json.dumps(doc))
    argv, reason, out, err = _run_checked(["analyze", trace, "--json", "--no-savings"], want=0)
    if reason is None and "impossible time" not in err:
        reason = "no warning names the impossible duration"
    if reason is None:
        worst = max((d["step_ms"]["max"] for d in json.loads(out)["devices"]), default=0.0)
        if worst >= us / 1e3 / 2:
            reason = f"a step of {worst:.3f} ms: the corrupted duration is a figure"
    return [(argv, reason)] if reason else []


def _case_begin_end(rng, doc, trace, base, work):
    """The host spans written as B/E pairs, in time order as a B/E writer emits them (at one instant an
    E before a B, the outer B first, the inner E first): the report of the X events, where the spans
    of each thread nest (B/E cannot write spans that overlap without nesting)."""
    spans = [
        e
        for e in doc["traceEvents"]
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and e.get("cat") in ("user_annotation", "cpu_op", "cuda_runtime")
    ]
    if not all(
        isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)) for e in spans
    ):
        return []
    marks = []
    for e in spans:
        b = {k: v for k, v in e.items() if k != "dur"}
        marks.append(((e["ts"], 1, -e["dur"]), {**b, "ph": "B"}))
        # the end as the decimal sum of the two numbers as written (a float sum is off by a ns)
        at = float(decimal.Decimal(repr(e["ts"])) + decimal.Decimal(repr(e["dur"])))
        end = {"ph": "E", "pid": e.get("pid"), "tid": e.get("tid"), "ts": at}
        marks.append(((e["ts"] + e["dur"], 0, -e["ts"]), end))
    marks.sort(key=lambda m: m[0])
    others = [e for e in doc["traceEvents"] if not any(e is x for x in spans)]
    be = work / "be.pt.trace.json"
    be.write_text(json.dumps({**doc, "traceEvents": others + [m for _, m in marks]}))
    argv, reason, out, err = _run_checked(["analyze", be, "--json", "--no-savings"])
    if reason is None and _nested(spans):
        _, _, want, err_x = _run_checked(["analyze", trace, "--json", "--no-savings"])
        if not out or not want:
            reason = None if bool(out) == bool(want) else f"one form failed: {(err or err_x).strip()[-300:]}"
        elif json.loads(out)["devices"] != json.loads(want)["devices"]:
            reason = "the B/E trace's figures differ from those of its X events"
    return [(argv, reason)] if reason else []


def _nested(spans: list[dict]) -> bool:
    """Whether the spans of each thread nest (none overlaps another without containing it)."""
    by_thread: dict = {}
    for e in spans:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append((e["ts"], -e["dur"]))
    for items in by_thread.values():
        stack: list[float] = []
        for ts, neg in sorted(items):
            while stack and stack[-1] <= ts:
                stack.pop()
            if stack and ts - neg > stack[-1]:
                return False
            stack.append(ts - neg)
    return True


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found |= {int(x) for x in (task / "children").read_text().split()}
    return found


def signal_case(case: int, seed: int, trace: Path, root: Path) -> list[Finding]:
    """`tracekit parse` of a larger trace stopped by SIGTERM, SIGHUP or SIGINT at a random moment."""
    rng = random.Random(f"{seed}-signal-{case}")
    sig = rng.choice([signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
    work = root / f"signal{case}"
    work.mkdir()
    out = work / rng.choice(["c.parquet", "c/"])
    argv = [sys.executable, "-m", "tracekit", "parse", str(trace), "-o", str(out)]
    env = {**os.environ, "TRACEKIT_WORKERS": "2", "PYTHONPATH": str(ROOT)}
    # SIGINT reaches a child only when it is not ignored: start it in its own session.
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    delay = rng.uniform(0.0, 2.0)
    workers: set[int] = set()
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and proc.poll() is None:
        workers |= _children(proc.pid)
        time.sleep(0.01)
    proc.send_signal(sig)
    findings = []
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return [Finding(case, argv, f"{sig.name} after {delay:.2f} s: no exit within 120 s")]
    left = any(work.iterdir())
    # Before tracekit/__main__.py runs (Python's start-up, importing the tracekit package) Python's own
    # behaviour holds (docs/QUIRKS.md): SIGTERM/SIGHUP kill (-N), Ctrl-C is a KeyboardInterrupt traceback
    # (-2; exit 1 while `site` runs). Nothing may exist yet then.
    before_start = not left and proc.returncode in (-sig, 1) and "tracekit/__main__.py" not in err
    if not before_start and (proc.returncode not in (0, 128 + sig) or "Traceback" in err):
        findings.append(
            Finding(case, argv, f"{sig.name} after {delay:.2f} s: exit {proc.returncode}: {err[-300:]}")
        )
    # Whatever exit: the output is complete or absent (a stop after its commit may leave it whole).
    bad = check_outputs(work, {}, Path(str(out).rstrip("/")), 0)
    if bad:
        findings.append(Finding(case, argv, f"{sig.name} after {delay:.2f} s: {bad}"))
    time.sleep(0.3)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()]
    if alive:
        findings.append(Finding(case, argv, f"{sig.name} after {delay:.2f} s: workers still running {alive}"))
    shutil.rmtree(work, ignore_errors=True)
    return findings


def fuzz(
    cases: int, seed: int, signals: int = 0, root: Path | None = None, verbose: bool = False
) -> list[Finding]:
    """Run `cases` in-process cases and `signals` signal cases; return what broke a promise."""
    with tempfile.TemporaryDirectory(prefix="tkfuzz-") as tmp:
        root = Path(root or tmp)
        base = prepare(root)
        runs = [functools.partial(run_case, case, seed, base, root) for case in range(cases)]
        if signals:
            big = root / "big.pt.trace.json"
            generate = [sys.executable, str(ROOT / "benchmarks/gen_large_trace.py"), "--size-mb", "24"]
            subprocess.run([*generate, "-o", str(big)], check=True, capture_output=True)
            runs += [functools.partial(signal_case, case, seed, big, root) for case in range(signals)]
        findings: list[Finding] = []
        for run in runs:
            found = run()
            findings += found
            if verbose:
                for f in found:
                    print(f, flush=True)
        return findings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=200, help="in-process cases (mutated inputs, options)")
    ap.add_argument("--signals", type=int, default=10, help="parses stopped by a signal at a random time")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    started = time.perf_counter()
    findings = fuzz(args.cases, args.seed, args.signals, verbose=True)
    print(
        f"{args.cases} cases + {args.signals} signal cases, seed {args.seed}: {len(findings)} finding(s) "
        f"in {time.perf_counter() - started:.0f} s"
    )
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
