"""Communication what-ifs against real runs (issue 40): DDP A/B pairs captured in interleaved rounds, each
prediction beside the run it predicts.

    python docs/results/ddp/ab.py capture --device cpu --nproc 2 --rounds 3 --out runs/ddp_cpu
    python docs/results/ddp/ab.py report runs/ddp_cpu [more sessions] --json results.json --markdown table.md

`capture` needs only torch (it runs `python -m tracekit.capture`, tracekit's dependency-free capture
package: what a GPU machine has); `report` needs tracekit (it runs `tracekit analyze` and `tracekit
whatif --json` on each run and reads their JSON). The arms, all heavy_mlp under DDP with an SGD step:

    base     nothing changed (A of every pair)
    slow     rank 1 sleeps SLOW_MS per step in a record_function region `tracekit.slow_rank`
    nocomm   a DDP comm hook that communicates nothing (ddp_comm=none): the same step, comm-free
    accum    grad_accum=ACCUM micro-batches, no_sync() on all but the last
    bucket   bucket_cap_mb=BUCKET_MB
    fsdp     parallel=fsdp (FSDP2): analysed, not predicted
    script   a user's own torchrun script, FSDP2 on a transformer (docs/results/ddp/train_fsdp.py, GPT-2
             from transformers where it is installed): captured with --script, analysed

and the checks (A → B):

    straggler removed   slow --ops '^tracekit\\.slow_rank$=0'          against base
    fully overlapped    base --comm 0 (transfer free, ranks still meet)  against nocomm
    no_sync accumulate  base: step + (ACCUM-1) x (step with --comm 0 and the optimizer's regions removed)
                        against accum
    exposed comm        base's exposed communication                    against base - nocomm
    bucket_cap_mb       not predicted (the trace does not say which gradients a bucket holds)

`report` pools the runs of every capture folder it is given (each a session of rounds) for the checks,
shows each session's error alone, and sets the step's parts (PHASES: the forward, the backward's
matmuls, the optimizer, the step thread's own communication work) of base beside the comm-free run's.

Rounds alternate the arms' order (A B … | … B A) so a drift of the machine falls on every arm alike;
`--smoke` runs one round of tiny steps (a quick check that everything runs). With `--chrt` each capture
runs under `chrt -r 10` (a real-time priority: the other work of a shared machine waits).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SLOW_MS = 20.0
ACCUM = 4
BUCKET_MB = {"cpu": 0.5, "cuda": 5.0}
OPTIMIZER_REGIONS = r"^Optimizer\.(step|zero_grad)#=0"
SLOW_REGION = r"^tracekit\.slow_rank$=0"
ARMS = {
    "base": [],
    "slow": ["slow_rank=1", f"slow_ms={SLOW_MS:g}"],
    "nocomm": ["ddp_comm=none"],
    "accum": [f"grad_accum={ACCUM}"],
    "bucket": [],  # bucket_cap_mb by device, below
    "fsdp": ["parallel=fsdp"],
    "script": [],
}
SCRIPT = ROOT / "docs" / "results" / "ddp" / "train_fsdp.py"
ONCE = ("fsdp", "script")  # captured in the first round only (analysed, nothing predicted)


def _arm_sets(arm: str, device: str, smoke: bool) -> list[str]:
    sets = ["optimizer=sgd", "timing_warmup=3", "timing_steps=6" if smoke else "timing_steps=20"]
    if smoke:
        sets += ["batch_size=8", "hidden=128", "in_features=64", "out_features=32", "layers=1"]
    if arm == "bucket":
        return sets + [f"bucket_cap_mb={BUCKET_MB[device]:g}"]
    return sets + ARMS[arm]


def _script_model(python: str) -> str:
    """gpt2 where the capturing interpreter has transformers, else the same shape from torch.nn."""
    has = subprocess.call([python, "-c", "import transformers"], stderr=subprocess.DEVNULL) == 0
    return "gpt2" if has else "torch"


def capture(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = list(ARMS)
    schedule = "wait=1,warmup=1,active=3,repeat=1" if args.smoke else "wait=1,warmup=2,active=5,repeat=1"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        order = arms if rnd % 2 else arms[::-1]
        for arm in order:  # one capture per arm and round
            if arm in ONCE and rnd > 1:
                continue
            if args.budget_s and time.monotonic() - t0 > args.budget_s:
                print(f"ab.py: {args.budget_s:g} s spent: no more captures", file=sys.stderr, flush=True)
                return
            run = out / f"{arm}-{rnd}"
            if run.exists():
                shutil.rmtree(run)
            what = ["--script", str(SCRIPT)] if arm == "script" else ["heavy_mlp"]
            cmd = [args.python, "-m", "tracekit.capture", *what, "-o", str(run), "--device", args.device]
            cmd += ["--schedule", schedule, "--label", f"{arm}-{rnd}", "--set", f"nproc={args.nproc}"]
            sets = _arm_sets(arm, args.device, args.smoke)
            for s in sets if arm != "script" else [x for x in sets if x.startswith("timing_")]:
                cmd += ["--set", s]
            if arm == "script":
                cmd += ["--", "--model", _script_model(args.python), "--steps", "100000"]
            if args.chrt:
                cmd = ["chrt", "-r", "10", *cmd]
            print(f"ab.py: round {rnd} {arm}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            load = os.getloadavg()[0]
            rc = subprocess.call(cmd, env=env, cwd=ROOT)
            # the machine's 1-minute load average before and after: other work on a shared machine
            meta = {"arm": arm, "round": rnd, "rc": rc, "load": [load, os.getloadavg()[0]]}
            (run / "ab.json").write_text(json.dumps(meta) + "\n")


# -- report ------------------------------------------------------------------------------------------
def _tracekit(*args: str) -> dict:
    cmd = [sys.executable, "-m", "tracekit", *args, "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"ab.py: {' '.join(cmd)} failed:\n{res.stderr}")
    return json.loads(res.stdout)


def _unprofiled_ms(run: Path) -> float:
    """The job's unprofiled step: per timed step the slowest rank's, then the median."""
    m = json.loads((run / "manifest.json").read_text())
    per_rank = [r["unprofiled"]["step_ms"] for r in m["ranks"] if r.get("unprofiled")]
    return statistics.median(max(xs) for xs in zip(*per_rank))


def _observed_ms(w: dict, key: str = "observed_step_ms") -> float:
    return max(d[key] for d in w["devices"])


def _predicted(w: dict) -> tuple[float, float]:
    """(profiled, unprofiled) predicted step: the slowest rank's (the job's pace)."""
    un = w.get("unprofiled") or {}
    return _observed_ms(w, "predicted_step_ms"), float(un.get("predicted_step_ms") or float("nan"))


def _comm(a: dict) -> dict:
    """The analysis' communication figures, the median over ranks of each figure (ms per step)."""
    ranks = (a.get("communication") or {}).get("ranks") or []
    keys = ("step", "compute", "comm", "hidden", "exposed", "exposed_wait", "exposed_transfer")
    out = {k: statistics.median(r["ms_per_step"][k] for r in ranks) for k in keys} if ranks else {}
    slow = (a.get("communication") or {}).get("slow_rank")
    return {**out, "slow_rank": slow}


# The step's parts that communication does not run in (the forward, the optimizer) or runs beside (the
# backward's matmuls), and the step thread's own communication work: ms per rank and step, from the
# analysis' region and op tables. A comm-free run whose compute is faster than the communicating run's
# is what neither --comm 0 nor the exposed time can see (docs/results/ddp_cpu.md).
PHASES = (
    ("forward (DDP forward region)", "region_stats", "DistributedDataParallel.forward"),
    ("backward matmuls (AddmmBackward0)", "op_stats", "AddmmBackward0"),
    ("optimizer (SGD.step region)", "region_stats", "Optimizer.step#SGD.step"),
    ("issuing the all-reduce (c10d::allreduce_)", "op_stats", "c10d::allreduce_"),
    ("the reducer's bucket ops (reducer::mul_out, copy_)", "op_stats", "torch::distributed::reducer::"),
)


def _phases(a: dict, nranks: int) -> dict:
    """PHASES' figures of one analysis (a name ending in '::' is a prefix): ms per rank and step."""
    out = {}
    for label, table, name in PHASES:
        rows = [
            r
            for r in a.get(table) or []
            if (r["name"].startswith(name) if name.endswith("::") else r["name"] == name)
        ]
        per_step = [sum(xs) for xs in zip(*(r["ns_per_step"] for r in rows))]
        out[label] = statistics.median(per_step) / nranks / 1e6 if per_step else 0.0
    return out


def _analysed(run: Path, arm: str) -> dict:
    """One run's analysis and, unless its arm is only analysed, its what-ifs."""
    rec: dict = {"arm": arm, "unprofiled_ms": _unprofiled_ms(run)}
    a = _tracekit("analyze", str(run), "--no-savings")
    rec["comm"] = _comm(a)
    rec["phases"] = _phases(a, len(json.loads((run / "manifest.json").read_text())["ranks"]))
    if arm in ONCE:
        return rec
    w = _tracekit("whatif", str(run))
    rec["profiled_ms"] = _observed_ms(w)
    if arm == "slow":
        rec["pred_straggler_removed"] = _predicted(_tracekit("whatif", str(run), "--ops", SLOW_REGION))
    if arm == "base":
        rec["pred_comm0"] = _predicted(_tracekit("whatif", str(run), "--comm", "0"))
        micro = _predicted(_tracekit("whatif", str(run), "--comm", "0", "--ops", OPTIMIZER_REGIONS))
        rec["pred_accum"] = tuple(
            s + (ACCUM - 1) * m for s, m in zip((rec["profiled_ms"], _predicted(w)[1]), micro)
        )
    return rec


def report(args: argparse.Namespace) -> None:
    """Every run of every capture folder (a session of interleaved rounds) analysed; the checks over
    all sessions' runs pooled, and each session's alone."""
    per_run: dict[str, dict] = {}
    sessions: dict[str, list[str]] = {}
    for root in map(Path, args.runs):
        for run in sorted(root.iterdir()):  # one analysis (and its what-ifs) per run
            meta = run / "ab.json"
            if not meta.exists() or json.loads(meta.read_text())["rc"] != 0:
                continue
            key = f"{root.name}/{run.name}"
            info = json.loads(meta.read_text())
            per_run[key] = {**_analysed(run, info["arm"]), "round": info["round"], "load": info.get("load")}
            sessions.setdefault(root.name, []).append(key)
    doc = {
        "runs": per_run,
        "checks": _checks(per_run),
        "sessions": {name: _checks({k: per_run[k] for k in keys}) for name, keys in sessions.items()},
        "load": {name: _load([per_run[k] for k in keys]) for name, keys in sessions.items()},
        "phases": _phase_rows(per_run),
    }
    text = json.dumps(doc, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    table = markdown(doc)
    if args.markdown:
        Path(args.markdown).write_text(table)
    print(table)


def _load(recs: list[dict]) -> list[float]:
    """The machine's 1-minute load average over a session's captures (before and after each): min, max."""
    xs = [x for r in recs for x in r.get("load") or []]
    return [min(xs), max(xs)] if xs else []


def markdown(doc: dict) -> str:
    """report's tables: the checks pooled, the error of each session alone, the step's parts."""
    sessions = _session_markdown(doc["sessions"], doc["load"])
    return _markdown(doc["checks"]) + "\n" + sessions + "\n" + _phase_markdown(doc["phases"])


def _session_markdown(sessions: dict[str, list[dict]], load: dict[str, list[float]]) -> str:
    names = sorted(sessions)
    lines = ["| check | basis | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    first = sessions[names[0]] if names else []
    for i, c in enumerate(first):
        errs = []
        for n in names:
            e = sessions[n][i]["error"] if i < len(sessions[n]) else float("nan")
            errs.append("-" if e != e else f"{e * 100:+.1f} %")
        lines.append(f"| {c['check']} | {c['basis']} | " + " | ".join(errs) + " |")
    spans = [f"{load[n][0]:.1f}–{load[n][1]:.1f}" if load.get(n) else "-" for n in names]
    lines.append("| the machine's load (1-minute average) | over the captures | " + " | ".join(spans) + " |")
    return "\n".join(lines) + "\n"


def _med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def _span(xs: list[float], digits: int = 2) -> str:
    xs = [x for x in xs if x == x]
    return f"{min(xs):.{digits}f}–{max(xs):.{digits}f}" if len(xs) > 1 else "-"


def _pairs(per_run: dict, a: str, b: str) -> list[tuple[dict, dict]]:
    """(A run, B run) of one session and round each: a prediction beside the run it predicts, captured
    minutes apart on the same machine (a session's drift falls on both)."""
    runs = {(k.split("/")[0], r["arm"], r["round"]): r for k, r in per_run.items()}
    return [
        (ra, runs[(s, b, n)]) for (s, arm, n), ra in sorted(runs.items()) if arm == a and (s, b, n) in runs
    ]


def _check(name: str, basis: str, rows: list[tuple[float, float, float]]) -> dict:
    """One check from its rounds' (A, predicted, measured): the medians and ranges over the rounds, and
    the error as the median of the rounds' errors (each prediction against its own round's run)."""
    a, p, m = (list(x) for x in zip(*rows))
    errors = [pi / mi - 1 if mi and pi == pi else float("nan") for pi, mi in zip(p, m)]
    return {
        "check": name,
        "basis": basis,
        "rounds": len(rows),
        "A_ms": _med(a),
        "predicted_ms": _med(p),
        "predicted_span": _span(p),
        "measured_ms": _med(m),
        "measured_span": _span(m),
        "error": _med(errors),
        "error_span": _span([e * 100 for e in errors], 1),
    }


def _checks(per_run: dict) -> list[dict]:
    bases = (("profiled", 0, "profiled_ms"), ("unprofiled", 1, "unprofiled_ms"))
    checks = []
    for name, a, b, key in (
        ("straggler removed", "slow", "base", "pred_straggler_removed"),
        ("communication fully overlapped (--comm 0)", "base", "nocomm", "pred_comm0"),
        (f"gradient accumulation x{ACCUM} with no_sync", "base", "accum", "pred_accum"),
    ):
        pairs = _pairs(per_run, a, b)
        for basis, i, mkey in bases:
            if pairs:
                checks.append(_check(name, basis, [(ra[mkey], ra[key][i], rb[mkey]) for ra, rb in pairs]))
    pairs = _pairs(per_run, "base", "nocomm")  # exposed communication against base - nocomm, per round
    for basis, _, mkey in bases:
        if pairs:
            rows = [
                (ra[mkey], ra["comm"].get("exposed", float("nan")), ra[mkey] - rb[mkey]) for ra, rb in pairs
            ]
            checks.append(_check("exposed communication vs base - comm-free", basis, rows))
    pairs = _pairs(per_run, "base", "bucket")  # measured, not predicted
    for basis, _, mkey in bases:
        if pairs:
            check = _check(
                "bucket_cap_mb changed (not predicted)",
                basis,
                [(ra[mkey], 1.0, rb[mkey]) for ra, rb in pairs],
            )
            checks.append(
                {
                    **check,
                    "predicted_ms": float("nan"),
                    "predicted_span": "-",
                    "error": float("nan"),
                    "error_span": "-",
                }
            )
    return checks


def _phase_rows(per_run: dict) -> list[dict]:
    """Per PHASES figure: base's and nocomm's (median over runs, with the runs' range) and their ratio;
    then tracekit's compute of base (step − exposed) beside nocomm's step."""
    by: dict[str, list[dict]] = {}
    for rec in per_run.values():
        by.setdefault(rec["arm"], []).append(rec)
    if not by.get("base") or not by.get("nocomm"):
        return []
    rows = []
    for label, _, _ in PHASES:
        b = [r["phases"][label] for r in by["base"]]
        n = [r["phases"][label] for r in by["nocomm"]]
        rows.append({"figure": label, "base": b, "nocomm": n})
    rows.append(
        {
            "figure": "compute (tracekit: step - exposed) / nocomm's step",
            "base": [r["comm"]["compute"] for r in by["base"]],
            "nocomm": [r["comm"].get("step", r["profiled_ms"]) for r in by["nocomm"]],
        }
    )
    for r in rows:
        r["ratio"] = _med(r["base"]) / _med(r["nocomm"]) - 1 if _med(r["nocomm"]) else float("nan")
    return rows


def _phase_markdown(rows: list[dict]) -> str:
    lines = [
        "| per rank and step (profiled) | base (ms) | range | comm-free (ms) | range | base / comm-free |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = "-" if r["ratio"] != r["ratio"] else f"{r['ratio'] * 100:+.1f} %"
        lines.append(
            f"| {r['figure']} | {_med(r['base']):.3f} | {_span(r['base'], 3)} | {_med(r['nocomm']):.3f} | "
            f"{_span(r['nocomm'], 3)} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def _markdown(checks: list[dict]) -> str:
    lines = [
        "| check | basis | rounds | A (ms) | predicted (ms) | range | measured (ms) | range | error "
        "| error range (%) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in checks:
        err = "-" if c["error"] != c["error"] else f"{c['error'] * 100:+.1f} %"
        pred = "-" if c["predicted_ms"] != c["predicted_ms"] else f"{c['predicted_ms']:.2f}"
        lines.append(
            f"| {c['check']} | {c['basis']} | {c['rounds']} | {c['A_ms']:.2f} | {pred} | "
            f"{c['predicted_span']} | {c['measured_ms']:.2f} | {c['measured_span']} | {err} | "
            f"{c['error_span']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture", help="capture the arms in interleaved rounds (needs only torch)")
    c.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    c.add_argument("--nproc", type=int, default=2)
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--out", required=True)
    c.add_argument("--python", default=sys.executable)
    c.add_argument("--smoke", action="store_true", help="one round of tiny steps")
    c.add_argument("--chrt", action="store_true", help="each capture under chrt -r 10")
    c.add_argument("--budget-s", type=float, default=0, help="start no capture after this many seconds")
    s = sub.add_parser("summary", help="a TSV of the runs: arm, round, status, unprofiled step (stdlib only)")
    s.add_argument("runs")
    r = sub.add_parser("report", help="analyse the runs, predict, and compare (needs tracekit)")
    r.add_argument("runs", nargs="+", help="capture folders (each a session of rounds), pooled")
    r.add_argument("--json")
    r.add_argument("--markdown")
    args = p.parse_args()
    if args.cmd == "capture":
        if args.smoke:
            args.rounds = 1
        capture(args)
    elif args.cmd == "summary":
        summary(Path(args.runs))
    else:
        report(args)


def summary(root: Path) -> None:
    print("run\tarm\tround\trc\tstatus\tunprofiled_step_ms\tload_before\tload_after")
    for run in sorted(p for p in root.iterdir() if (p / "ab.json").exists()):
        meta = json.loads((run / "ab.json").read_text())
        status, step = "-", "-"
        if (run / "manifest.json").exists():
            status = json.loads((run / "manifest.json").read_text()).get("status", "-")
            with contextlib.suppress(KeyError, ValueError, TypeError):  # a run that crashed
                step = f"{_unprofiled_ms(run):.3f}"
        load = "\t".join(f"{x:.2f}" for x in meta["load"]) if "load" in meta else "-\t-"
        print(f"{run.name}\t{meta['arm']}\t{meta['round']}\t{meta['rc']}\t{status}\t{step}\t{load}")


if __name__ == "__main__":
    main()
