#!/usr/bin/env bash
# Real traces made the users' way, each with its unprofiled truth measured beside it (issue 37, item 6):
# every script of this folder run three times in its own folder: `--mode truth` (no profiler: the steady
# state), `--mode profile` (the user's own run: its profiler writes its traces), and the same under
# tracekit's capture (`python -m tracekit.capture --script`: the profiler adopted, the steps, fetches and
# the DataLoader workers' batches timed). Only torch (+ torchvision, lightning, transformers where a script
# uses them) is needed on the target; tracekit's analysis side reads the results elsewhere.
#
#   OUT=/some/dir bash docs/results/foreign/run_gpu.sh            # the GPU machine (about 5 min, one H100)
#   SMOKE=1 OUT=/tmp/foreign bash docs/results/foreign/run_gpu.sh  # a CPU try-out: tiny sizes; a script whose
#                                                                   # library is missing says so and is skipped
#   CASES="seed inference" OUT=... bash docs/results/foreign/run_gpu.sh
#
# Writes $OUT/<case>.tar.gz (its folder: truth.json, plain/ with the user's traces, capture/ with the run
# folder and the traces where the script's handler wrote them, log.txt) for each case, and
# $OUT/summary.json (versions, device, each case's truth, statuses, durations, sizes).
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
OUT="${OUT:?set OUT to the folder for the results}"
PY="${PYTHON:-python3}"
SMOKE="${SMOKE:-0}"
LIMIT="${LIMIT:-150}"  # seconds per run
CASES="${CASES:-seed lightning generate inference sidestream}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

if [ "$SMOKE" = 1 ]; then
  VISION="--batch 8 --image 64 --workers 2"
  SEED="$VISION --steps 4 --warmup 2"; SIDE="$VISION --steps 4 --warmup 2"
  LIGHT="$VISION --max-steps 8 --warmup 2"; GEN="--layers 2 --width 64 --tokens 8 --runs 2"
  INFER="--batch 4 --passes 4"
else
  SEED="--steps 30 --warmup 8"; SIDE="--steps 30 --warmup 8"
  LIGHT="--max-steps 40 --warmup 8"; GEN=""; INFER=""
fi

script_of() {
  case "$1" in
    seed) echo "seed_recipe.py $SEED" ;;
    lightning) echo "lightning_profiler.py $LIGHT" ;;
    generate) echo "hf_generate.py $GEN" ;;
    inference) echo "inference.py $INFER" ;;
    sidestream) echo "side_stream.py $SIDE" ;;
  esac
}

run() {  # run NAME LOGFILE CMD...: time it (ms, shell arithmetic: the GPU image has no bc), keep its status
  local name="$1" log="$2"; shift 2
  local t0 t1 rc
  t0=$(date +%s%N)
  timeout "$LIMIT" "$@" >>"$log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  echo "$name $rc $(( (t1 - t0) / 1000000 ))" >>"$WORK/times.txt"
}

for c in $CASES; do
  set -- $(script_of "$c")
  script="$1"; shift
  dir="$WORK/$c"; mkdir -p "$dir"
  echo "== $c: $script $*" | tee -a "$dir/log.txt"
  (cd "$dir" && run "$c/truth" log.txt "$PY" "$HERE/$script" --mode truth --out truth.json "$@")
  if grep -q "skipped, .* is not installed" "$dir/log.txt"; then
    tail -n 1 "$dir/log.txt"; tar czf "$OUT/$c.tar.gz" -C "$WORK" "$c"; continue
  fi
  (cd "$dir" && mkdir -p plain && cd plain && run "$c/plain" ../log.txt "$PY" "$HERE/$script" --mode profile --log log "$@")
  (cd "$dir" && mkdir -p capture && cd capture && run "$c/capture" ../log.txt \
     "$PY" -m tracekit.capture --script "$HERE/$script" -o run --label capture -- --mode profile --log log "$@")
  tail -n 5 "$dir/log.txt"
  tar czf "$OUT/$c.tar.gz" -C "$WORK" "$c"
  if [ "$(stat -c %s "$OUT/$c.tar.gz")" -gt 16000000 ]; then  # the plain run's traces go first
    rm -rf "$dir/plain/log"; echo "plain traces left out: over 16 MB" >>"$dir/log.txt"
    tar czf "$OUT/$c.tar.gz" -C "$WORK" "$c"
  fi
done

"$PY" - "$WORK" "$OUT" <<'PY'
import json, os, platform, sys
work, out = sys.argv[1], sys.argv[2]
import torch
doc = {"python": platform.python_version(), "torch": torch.__version__,
       "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
       "cpus": len(os.sched_getaffinity(0)), "versions": {}, "cases": {}}
for mod in ("torchvision", "lightning", "transformers"):
    try:
        doc["versions"][mod] = __import__(mod).__version__
    except Exception:
        doc["versions"][mod] = None
times = {}
for line in open(os.path.join(work, "times.txt")):
    name, rc, *ms = line.split()  # a line without its time still says the run's status
    times[name] = {"rc": int(rc), "seconds": round(int(ms[0]) / 1e3, 1) if ms else None}
for case in sorted({n.split("/")[0] for n in times}):
    d = os.path.join(work, case)
    truth = os.path.join(d, "truth.json")
    man = os.path.join(d, "capture", "run", "manifest.json")
    m = json.load(open(man)) if os.path.exists(man) else {}
    sizes = {}
    for sub in ("plain/log", "capture/log", "capture/run"):
        p = os.path.join(d, sub)
        if os.path.isdir(p):
            sizes[sub] = {f: os.path.getsize(os.path.join(p, f)) for f in sorted(os.listdir(p))}
    t = json.load(open(truth)) if os.path.exists(truth) else None
    doc["cases"][case] = {
        "runs": {k.split("/")[1]: v for k, v in times.items() if k.startswith(case + "/")},
        "truth": {k: v for k, v in t.items() if k != "step_ms"} if t else None,
        "capture": {k: m.get(k) for k in ("status", "error", "schedule", "adopted", "loader",
                                           "unprofiled_step_ms")} if m else None,
        "files": sizes,
        "tarball_bytes": os.path.getsize(os.path.join(out, case + ".tar.gz")),
    }
json.dump(doc, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({c: {k: v["rc"] for k, v in x["runs"].items()} for c, x in doc["cases"].items()}))
PY
