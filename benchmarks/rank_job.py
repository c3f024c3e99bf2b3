"""Build an N-rank job from the real 2-rank H200 DDP capture (fixtures/h200/ddp_slow_rank1).

Rank 1 of that capture sleeps 20 ms per step, so rank 0's all-reduces wait for it. An N-rank job here
is: one straggler (a copy of rank 1) and N - 1 copies of rank 0, each made distinct so that ranks
differ as they would on a real job:

- its clock is shifted by a few µs (hosts synchronised well below a step, not exactly);
- its compute kernels (not the collectives) are shortened by a rank-specific factor in [0.90, 1.00],
  each from its own start, so they stay inside their original slot on the stream and nothing overlaps
  (the idle time between them grows: ranks differ in their idle figures);
- its host process id is its own (pid and the main thread's tid).

The collectives keep their ends (up to the clock shift): a collective ends at once on all ranks, which
is what the cross-rank matching relies on. `distributedInfo` carries the new rank and world size and
the file is named `rank<R>.pt.trace.json.gz`. Deterministic: the same (n, straggler, seed) gives the
same bytes.

    python benchmarks/rank_job.py 64 -o benchmarks/data/ranks_64
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import random
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "h200" / "ddp_slow_rank1"
DONE = ".complete"  # written last: a folder without it is an interrupted build


def default_straggler(n: int) -> int:
    """A rank in the middle of the job (neither the first nor the last, which sort specially)."""
    return (n * 2) // 3 if n > 2 else n - 1


def load_base() -> tuple[dict, dict]:
    """The fixture's (fast rank, slow rank) traces as parsed JSON."""
    fast = slow = None
    for path in sorted(FIXTURE.glob("rank*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh)
        if doc["distributedInfo"]["rank"] == 0:
            fast = doc
        else:
            slow = doc
    assert fast is not None and slow is not None, f"{FIXTURE}: expected rank 0 and rank 1 traces"
    return fast, slow


def _host_pid(doc: dict) -> int:
    """The process id of the host side: the pid of the ProfilerStep spans."""
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "user_annotation" and str(ev.get("name", "")).startswith("ProfilerStep"):
            return ev["pid"]
    raise ValueError("no ProfilerStep span in the base trace")


def rank_trace(base: dict, rank: int, world_size: int, *, shift_us: float, scale: float) -> dict:
    """A copy of `base` as rank `rank`: clock shifted by `shift_us`, compute kernels scaled by `scale`."""
    old_pid = _host_pid(base)
    new_pid = 100_000 + rank
    events = []
    for ev in base["traceEvents"]:
        ev = dict(ev)
        if "ts" in ev:
            ev["ts"] = round(float(ev["ts"]) + shift_us, 3)
        if ev.get("cat") == "kernel" and "nccl" not in str(ev.get("name", "")).lower() and "dur" in ev:
            ev["dur"] = round(float(ev["dur"]) * scale, 3)
        if ev.get("pid") == old_pid:
            ev["pid"] = new_pid
        if ev.get("tid") == old_pid:
            ev["tid"] = new_pid
        events.append(ev)
    doc = {k: copy.deepcopy(v) for k, v in base.items() if k != "traceEvents"}
    info = doc["distributedInfo"]
    info["rank"] = rank
    info["world_size"] = world_size
    for pg in info.get("pg_config") or []:
        pg["pg_size"] = world_size
        pg["ranks"] = list(range(world_size))
    doc["traceName"] = f"rank{rank}.pt.trace.json"
    doc["traceEvents"] = events
    return doc


def build_job(n: int, out: Path, *, straggler: int | None = None, seed: int = 0) -> Path:
    """Write an n-rank job into folder `out` (reused when it is complete and was built alike)."""
    straggler = default_straggler(n) if straggler is None else straggler
    if not 0 <= straggler < n:
        raise ValueError(f"straggler {straggler} is not a rank of a {n}-rank job")
    spec = {"ranks": n, "straggler": straggler, "seed": seed, "fixture": FIXTURE.name}
    done = out / DONE
    if done.exists() and json.loads(done.read_text()) == spec:
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    fast, slow = load_base()
    rng = random.Random(seed)
    for rank in range(n):
        shift_us = round(rng.uniform(0.0, 3.0), 3)
        scale = 1.0 if rank == straggler else round(rng.uniform(0.90, 1.00), 4)
        doc = rank_trace(slow if rank == straggler else fast, rank, n, shift_us=shift_us, scale=scale)
        data = json.dumps(doc, separators=(",", ":")).encode()
        with open(out / f"rank{rank}.pt.trace.json.gz", "wb") as fh:
            fh.write(gzip.compress(data, compresslevel=1, mtime=0))
    done.write_text(json.dumps(spec))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ranks", type=int)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--straggler", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    build_job(args.ranks, args.output, straggler=args.straggler, seed=args.seed)
    print(f"wrote {args.ranks} rank traces to {args.output}")


if __name__ == "__main__":
    main()
