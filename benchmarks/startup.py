"""Start-up: a tiny trace's `tracekit parse` and `tracekit info` end to end, against the imports they need.

    python benchmarks/startup.py [--repeat 9] [--trace fixtures/h200_probe/tiny.pt.trace.json.gz]
    python benchmarks/startup.py --trees /tmp/before,.      # an A/B: each tree's tracekit, in turns

Each figure is its own process (wall seconds, and user+system CPU from wait4), the medians of --repeat
runs taken in turns so that the machine's load falls on all alike:

- `python -c pass`: the interpreter and site;
- `import numpy, pyarrow.parquet`: the two libraries every tracekit command imports (the floor);
- `tracekit parse TRACE` and `tracekit info CAPTURE` of its capture, and `tracekit --help` (which
  imports every command's module).

With `--trees`, the tracekit commands run from each checkout in turn (its own tree first on the path,
its C extensions built in place), so that the machine's load falls on all alike.

Each is timed twice: with the environment as it is, and with Python's bytecode cached in a fresh
PYTHONPYCACHEPREFIX (written by one untimed run first). The second is what a normal install sees (pip
compiles every module it installs); the first differs where PYTHONDONTWRITEBYTECODE is set and a tree
has no __pycache__, as on this project's dev VM (its environment sets it) and on images that strip
bytecode: then Python compiles each module from source at every start (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict, cwd: Path = ROOT) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `argv` (wait4's usage: its own, not the parent's). Its stderr
    goes to a file, read only on failure: a pipe nobody reads while waiting could fill and stall it."""
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed:\n{err.read().decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--trace", type=Path, default=ROOT / "fixtures" / "h200_probe" / "tiny.pt.trace.json.gz")
    ap.add_argument("--trees", default="", help="comma-separated checkouts to compare (default: this one)")
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",") if t] or [ROOT]
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "tiny.parquet"
        out = Path(tmp) / "again.parquet"
        tk = [py, "-m", "tracekit"]
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "import numpy, pyarrow.parquet": [py, "-c", "import numpy, pyarrow.parquet"],
            "tracekit parse (tiny trace)": [*tk, "parse", str(args.trace), "-o", str(out), "--force"],
            "tracekit info (its capture)": [*tk, "info", str(capture)],
            "tracekit --help": [*tk, "--help"],
        }
        cases = [(t, c) for t in trees for c in commands if t == trees[0] or c.startswith("tracekit")]
        base = dict(os.environ)
        cached = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        envs = {"as is": base, "bytecode cached": cached}
        timed([*tk, "parse", str(args.trace), "-o", str(capture)], base)  # the capture info reads
        for env in envs.values():  # the untimed first run of each (writes the cache for the second)
            for tree, c in cases:
                timed(commands[c], {**env, "PYTHONPATH": str(tree)}, tree)
        runs: dict = {(e, t, c): [] for e in envs for t, c in cases}
        for _ in range(args.repeat):
            for e, env in envs.items():
                for tree, c in cases:
                    runs[(e, tree, c)].append(timed(commands[c], {**env, "PYTHONPATH": str(tree)}, tree))
    flag = os.environ.get("PYTHONDONTWRITEBYTECODE")
    print(
        f"python {sys.version.split()[0]}; PYTHONDONTWRITEBYTECODE={flag!r}; "
        f"load {os.getloadavg()[0]:.1f}; {args.repeat} runs each, medians (min-max) wall s, CPU s"
    )
    for e in envs:
        print(f"-- {e}")
        for tree, c in cases:
            walls = [w for w, _ in runs[(e, tree, c)]]
            cpus = [u for _, u in runs[(e, tree, c)]]
            label = f"{c} [{tree}]" if len(trees) > 1 and c.startswith("tracekit") else c
            print(
                f"  {label:48s} wall {statistics.median(walls):.3f} ({min(walls):.3f}-{max(walls):.3f})"
                f"   CPU {statistics.median(cpus):.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
