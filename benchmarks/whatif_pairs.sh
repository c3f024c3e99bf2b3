#!/usr/bin/env bash
# A/B pairs for validating `tracekit whatif` (issue 11, item 7): each pair is a run with one cause of idle
# time present (A) and one with that cause changed for real (B), captured straight through the capture
# package (python3 -m tracekit.capture: stdlib + torch only).
#
#   OUT=/some/dir bash benchmarks/whatif_pairs.sh              # from the repo root; every configuration
#   CONFIGS="mlp mlp_sync" ROUNDS=1 bash benchmarks/whatif_pairs.sh   # a subset (names below)
#   DEVICE=cpu SMALL=1 ROUNDS=1 bash benchmarks/whatif_pairs.sh  # try the script out on a CPU box
#
# Pairs (A → B) and the configurations they use:
#   sync         mlp_sync → mlp                  small MLP, .item() after every layer → none
#   sync_stack   mlp_sync_stack → mlp_stack      the same with Python stacks recorded (with_stack: a
#                                                costlier profiler, as the sync_per_layer run had)
#   tf32         heavy → heavy_tf32              the article's MLP, fp32 → TF32 matmuls
#   interp_host  mlp_spin50 → mlp                small MLP (host-bound), 50 µs of Python per layer → 0
#   interp_gpu   heavy_spin50 → heavy            article MLP (GPU-bound), 50 µs of Python per layer → 0
#   interp_tf32  heavy_tf32_spin50 → heavy_tf32  article MLP in TF32 (in between), 50 µs per layer → 0
#   dataloader   dl_slow → dl_fast               DataLoader, num_workers=0, batch 32, 0.5 ms sleep per
#                                                sample → no sleep
# "small MLP" is the sync_per_layer run of gpu_captures.sh: 512 wide, 16 hidden layers, batch 64. Every
# configuration runs ROUNDS times (default 2), the order reversed every other round, so drift of the
# machine falls on A and B alike and each pair's ratio is measured ROUNDS times. Each capture:
# timing_warmup=5 untimed + timing_steps=30 timed unprofiled steps (CUDA events), then the schedule
# wait=1,warmup=1,active=8,repeat=1 (8 profiled steps, one trace); no Python stacks except in sync_stack.
#
# Writes ROUNDS + 2 files under $OUT (default benchmarks/data/whatif, git-ignored):
#   $OUT/whatif_r<round>.tar  that round's run folders <config>-<round>/: rank0.<time>.pt.trace.json.gz +
#                           manifest.json
#   $OUT/summary.tsv        one line per run (unprofiled and profiled host step times, trace bytes, knobs'
#                           extra), then one line per pair and round (B/A of the unprofiled medians)
#   $OUT/log.txt            the captures' own output
# PIN (default none): run every capture under `taskset -c $PIN` (benchmarks/cpu_speed.py names the fastest
# CPU). BUDGET_S (default 0 = none): start no capture after this many seconds, so a time-limited call still
# writes its tar; CAPTURE_TIMEOUT_S (default 180) stops a capture that hangs.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/data/whatif}"
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
ROUNDS="${ROUNDS:-2}"
SCHED="${SCHED:-wait=1,warmup=1,active=8,repeat=1}"
TIMING="${TIMING:---set timing_warmup=5 --set timing_steps=30}"
BUDGET_S="${BUDGET_S:-0}"
CAPTURE_TIMEOUT_S="${CAPTURE_TIMEOUT_S:-180}"
PIN="${PIN:-}"
PINNED=()
[ -n "$PIN" ] && PINNED=(taskset -c "$PIN")
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/log.txt"
: >"$LOG"

ALL_CONFIGS="mlp_sync mlp mlp_sync_stack mlp_stack mlp_spin50 heavy heavy_tf32 heavy_spin50 heavy_tf32_spin50 dl_slow dl_fast"
CONFIGS="${CONFIGS:-$ALL_CONFIGS}"
PAIRS="sync:mlp_sync:mlp sync_stack:mlp_sync_stack:mlp_stack tf32:heavy:heavy_tf32 interp_host:mlp_spin50:mlp interp_gpu:heavy_spin50:heavy
interp_tf32:heavy_tf32_spin50:heavy_tf32 dataloader:dl_slow:dl_fast"

SMALL_MLP="--set in_features=512 --set hidden=512 --set layers=16 --set out_features=512 --set batch_size=64"
HEAVY=""  # the article's sizes: 1024→4096 (8×4096²)→512, batch 256
DL="--set num_workers=0 --set batch_size=32"
if [ "${SMALL:-0}" = 1 ]; then  # a quick try-out: tiny sizes, few steps
  SMALL_MLP="--set in_features=32 --set hidden=32 --set layers=4 --set out_features=8 --set batch_size=4"
  HEAVY="--set in_features=64 --set hidden=128 --set layers=2 --set out_features=16 --set batch_size=8"
  DL="$DL --set dataset_size=256 --set features=16 --set hidden=16"
  TIMING="--set timing_warmup=1 --set timing_steps=3"
  SCHED="wait=1,warmup=1,active=2,repeat=1"
fi

args_for() {  # configuration -> workload and --set flags
  case "$1" in
    mlp_sync)          echo "heavy_mlp $SMALL_MLP --set sync_every_layer=true" ;;
    mlp)               echo "heavy_mlp $SMALL_MLP" ;;
    mlp_sync_stack)    echo "heavy_mlp $SMALL_MLP --set sync_every_layer=true --set with_stack=true" ;;
    mlp_stack)         echo "heavy_mlp $SMALL_MLP --set with_stack=true" ;;
    mlp_spin50)        echo "heavy_mlp $SMALL_MLP --set host_spin_us=50" ;;
    heavy)             echo "heavy_mlp $HEAVY" ;;
    heavy_tf32)        echo "heavy_mlp $HEAVY --set tf32=true" ;;
    heavy_spin50)      echo "heavy_mlp $HEAVY --set host_spin_us=50" ;;
    heavy_tf32_spin50) echo "heavy_mlp $HEAVY --set tf32=true --set host_spin_us=50" ;;
    dl_slow)           echo "dataloader_train $DL --set sample_sleep_ms=0.5" ;;
    dl_fast)           echo "dataloader_train $DL --set sample_sleep_ms=0" ;;
    *) return 1 ;;
  esac
}

"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')" 2>&1 | tee -a "$LOG"

START=$SECONDS
for round in $(seq 1 "$ROUNDS"); do
  order="$CONFIGS"
  [ $((round % 2)) -eq 0 ] && order="$(echo "$CONFIGS" | tr ' ' '\n' | tac | tr '\n' ' ')"
  for c in $order; do
    spec="$(args_for "$c")" || { echo "unknown configuration $c; choose from: $ALL_CONFIGS" | tee -a "$LOG"; continue; }
    if [ "$BUDGET_S" -gt 0 ] && [ $((SECONDS - START)) -ge "$BUDGET_S" ]; then
      echo "== $c-$round: skipped, ${BUDGET_S} s budget spent" | tee -a "$LOG"
      continue
    fi
    echo "== $c-$round: ${PINNED[*]} $PY -m tracekit.capture $spec $TIMING --device $DEVICE --schedule $SCHED" >>"$LOG"
    t0=$SECONDS
    # shellcheck disable=SC2086
    timeout "$CAPTURE_TIMEOUT_S" "${PINNED[@]}" "$PY" -m tracekit.capture $spec $TIMING --device "$DEVICE" --schedule "$SCHED" \
      --label "$c-$round" -o "$WORK/$c-$round" --force >>"$LOG" 2>&1
    echo "== $c-$round: exit status $? after $((SECONDS - t0)) s" | tee -a "$LOG"
  done
done

"$PY" - "$WORK" "$OUT/summary.tsv" "$PAIRS" <<'PYEOF' | tee -a "$LOG"
import json, os, statistics, sys
work, dest, pairs = sys.argv[1], sys.argv[2], sys.argv[3].split()
cols = ["run", "status", "unprofiled_step_ms_median", "unprofiled_step_ms_mean", "unprofiled_steps",
        "profiled_host_step_ms_median_active", "trace_bytes", "extra", "error"]
rows, med = [], {}
for run in sorted(os.listdir(work)):
    d = os.path.join(work, run)
    path = os.path.join(d, "manifest.json")
    if not os.path.exists(path):
        rows.append([run, "no manifest"] + [""] * (len(cols) - 2))
        continue
    m = json.load(open(path))
    ms = m["unprofiled_step_ms"]
    prof = m["ranks"][0]["profiled"]
    active = [t for t, ph in zip(prof["host_step_ms"], prof["phases"]) if ph == "active"]
    sizes = [os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".pt.trace.json.gz")]
    if sizes and max(sizes) > 1_500_000:
        print(f"warning: {run}: a trace is {max(sizes)} bytes (> 1.5 MB); shrink its sizes")
    if ms:
        med[run] = statistics.median(ms)
    rows.append([run, m["status"], f"{statistics.median(ms):.4f}" if ms else "",
                 f"{statistics.mean(ms):.4f}" if ms else "", len(ms),
                 f"{statistics.median(active):.4f}" if active else "", max(sizes) if sizes else 0,
                 json.dumps(m.get("extra", {}), sort_keys=True),
                 (m.get("error") or "").replace("\t", " ").replace("\n", " | ")[:300]])
lines = ["\t".join(cols)] + ["\t".join(map(str, r)) for r in rows]
lines += ["", "\t".join(["pair", "A", "B", "unprofiled_B_over_A"])]
for spec in pairs:
    name, a, b = spec.split(":")
    rounds = sorted({r.rsplit("-", 1)[1] for r in med if r.rsplit("-", 1)[0] in (a, b)})
    for rnd in rounds:
        ra, rb = f"{a}-{rnd}", f"{b}-{rnd}"
        if ra in med and rb in med:
            lines.append("\t".join([name, ra, rb, f"{med[rb] / med[ra]:.4f}"]))
with open(dest, "w") as fh:
    fh.write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF

for round in $(seq 1 "$ROUNDS"); do
  names="$(cd "$WORK" && ls -d -- *-"$round" 2>/dev/null)"
  # shellcheck disable=SC2086
  [ -n "$names" ] && tar -C "$WORK" -cf "$OUT/whatif_r$round.tar" $names
done
ls -la "$OUT" | tee -a "$LOG"
echo "total $((SECONDS - START)) s" | tee -a "$LOG"
rm -rf "$WORK"
