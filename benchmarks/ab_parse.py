"""`tracekit parse` of one trace by two trees (or two settings), alternately: user and system CPU seconds.

    python benchmarks/ab_parse.py TRACE --trees /work/main,/tmp/before [--repeat 8]
    python benchmarks/ab_parse.py TRACE --env "TRACEKIT_WORKERS=1,TRACEKIT_WORKERS=2 X=1"

Each run is its own process (its workers included, from wait4), the variants taking turns so that the
machine's load and its memory's state fall on both alike; the medians and minima are printed. User CPU is
the steadier figure on a VM whose page faults cost a varying amount of kernel time (`--warm GIB` touches
that much memory in a child before each run, which steadies it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from vm import WARM_HELP, tree_env, warm

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--trees", default=str(ROOT), help="comma-separated checkouts (PYTHONPATH of each run)")
    ap.add_argument("--env", default="", help="comma-separated variants of NAME=VALUE (space-separated)")
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--warm", type=float, default=0, help=WARM_HELP)
    args = ap.parse_args(argv)
    trees = args.trees.split(",")
    envs = [e for e in args.env.split(",") if e] or [""]
    variants = [(t, e) for t in trees for e in envs]
    runs: dict = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "capture.parquet"
        for _ in range(args.repeat):
            for tree, setting in variants:
                env = tree_env(tree)
                for pair in setting.split():
                    name, _, value = pair.partition("=")
                    env[name] = value
                warm(args.warm)
                cmd = [sys.executable, "-m", "tracekit", "parse", args.trace, "-o", str(out), "--force"]
                proc = subprocess.Popen(
                    cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
                _, status, usage = os.wait4(proc.pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise SystemExit(f"{tree} {setting}: parse failed: {proc.stderr.read().decode()[-2000:]}")
                runs[(tree, setting)].append((usage.ru_utime, usage.ru_stime))
    for (tree, setting), r in runs.items():
        user, system = [u for u, _ in r], [s for _, s in r]
        total = [u + s for u, s in r]
        print(
            f"{tree} {setting}".strip()
            + f": user median {statistics.median(user):.2f} min {min(user):.2f} | "
            f"system median {statistics.median(system):.2f} | CPU median {statistics.median(total):.2f} "
            f"min {min(total):.2f} ({len(r)} runs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
