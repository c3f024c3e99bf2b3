"""What each import that tracekit makes inside a function would cost the commands that skip it.

    python benchmarks/import_costs.py [--repeat 7]

tracekit's modules import at their top, except where a command's start-up would pay for a module it does
not use (docs/STYLE.md 16): those imports are the rows of DEFERRED below, each with the modules that are
already imported where it is made and the commands that skip it. Each figure is the median user+system
CPU of a fresh `python -c "import BASE; import MODULE"` less that of `python -c "import BASE"` (wait4's
usage), the two taken in turns, with Python's bytecode cached in a fresh PYTHONPYCACHEPREFIX (what a
normal install sees: benchmarks/startup.py says why this VM needs it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HELP = "tracekit.cli, tracekit.commands.flags"  # what `tracekit --help` imports before the commands
CLI = f"{HELP}, tracekit.api"
# (the module imported inside a function, what is imported already where it is, who skips it)
DEFERRED = [
    ("tracekit.api", HELP, "--help (the commands import it when run)"),
    ("tracekit.data.store", HELP, "--help (render.output, commands)"),
    ("tracekit.capture.workload", HELP, "--help (capture, demo, workloads)"),
    (
        "tracekit.analysis.causes",
        f"{HELP}, tracekit.whatif.scenario",
        "--help (whatif.scenario's --set check: the cause table, numpy, pyarrow)",
    ),
    ("tracekit.api.run", CLI, "tracekit.api's analyze/whatif: info and parse never load the analysis"),
    ("tracekit.api.views", CLI, "tracekit.api's verbs that return a view: info and parse (pandas)"),
    ("tracekit.compare.diff", CLI, "tracekit.api.diff: every other command"),
    ("tracekit.compare.group", CLI, "tracekit.api.diff's pooled sides: every other command"),
    ("tracekit.parse.parser", CLI, "tracekit.api.describe/load/annotate: info of a capture"),
    ("tracekit.scale.job", CLI, "tracekit.api.parse: info"),
    ("tracekit.orchestrate.runner", CLI, "tracekit.api.capture: every other command"),
    ("tracekit.export.tensorboard", CLI, "tracekit.api.capture/tensorboard: every other command"),
    ("tracekit.export.annotate", CLI, "tracekit.api.annotate: every other command"),
    (
        "tracekit.analysis.partial",
        f"{CLI}, tracekit.scale.job",
        "parse (AnalyzeOptions.params, scale.job/tasks)",
    ),
    ("tracekit.scale.executor", CLI, "info (commands.flags.executor: the commands that run per-rank work)"),
    ("tracekit.render.diff", f"{CLI}, tracekit.scale.job", "diff without --plot"),
    ("tracekit.render.sections", "tracekit.render.info", "info's JSON and Markdown (render.info's text)"),
    ("tracekit.scale.ray_backend", "tracekit.cli", "every command without --ray (cli._optional_values)"),
    ("tensorboard.summary.writer.event_file_writer", "tracekit.export.tensorboard", "view (export._tb)"),
    (
        "pyarrow.compute",
        "tracekit.parse.parser, tracekit.scale.tasks",
        "parse (decode's msgspec path, tasks)",
    ),
]


def cpu(code: str, env: dict) -> float:
    """User + system CPU seconds of `python -c code`, from wait4."""
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"python -c {code!r} failed")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", metavar="MODULE", help="measure only the deferred imports whose name has this")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"), PYTHONPATH=str(ROOT))
        load = os.getloadavg()[0]
        print(f"python {sys.version.split()[0]}; load {load:.1f}; {args.repeat} runs each, medians")
        print(f"{'deferred import':46} {'CPU-s':>6} {'base':>6}  skipped by")
        for module, base, who in DEFERRED:
            if args.only and args.only not in module:
                continue
            before, after = f"import {base}", f"import {base}; import {module}"
            cpu(after, env)  # writes the bytecode of both
            runs: dict = {before: [], after: []}
            for _ in range(args.repeat):
                for code in runs:
                    runs[code].append(cpu(code, env))
            b, a = statistics.median(runs[before]), statistics.median(runs[after])
            print(f"{module:46} {a - b:+6.3f} {b:6.3f}  {who}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
