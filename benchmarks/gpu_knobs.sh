#!/usr/bin/env bash
# The second article's tuning knobs on a GPU, captured for `tracekit diff` (docs/results/gpu_knobs/):
#   dataloader_train num_workers 4 (article default) vs 0, pin_memory on vs off; heavy_mlp AMP off vs on.
# ROUNDS rounds; within a round the configurations run in an order that alternates from round to round, so
# slow drift of the machine falls on every configuration alike. Runs the dependency-free capture package
# directly (python3 -m tracekit.capture: needs only torch).
#
#   OUT=/some/dir bash benchmarks/gpu_knobs.sh      # writes $OUT/gpu_knobs.tar (every run folder) + log.txt
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/data/gpu_knobs}"
PY="${PYTHON:-python3}"
ROUNDS="${ROUNDS:-4}"
SCHED="${SCHED:-wait=1,warmup=1,active=5,repeat=1}"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"

CONFIGS="dl_workers4 dl_workers0 dl_nopin mlp_fp32 mlp_amp"
args_for() {
  case "$1" in
    dl_workers4) echo "dataloader_train" ;;  # the article: num_workers=4, pin_memory=True
    dl_workers0) echo "dataloader_train --set num_workers=0" ;;
    dl_nopin)    echo "dataloader_train --set pin_memory=false" ;;
    mlp_fp32)    echo "heavy_mlp" ;;
    mlp_amp)     echo "heavy_mlp --set amp=true" ;;
  esac
}

for round in $(seq 1 "$ROUNDS"); do
  order="$CONFIGS"
  [ $((round % 2)) -eq 0 ] && order="$(echo "$CONFIGS" | tr ' ' '\n' | tac | tr '\n' ' ')"
  for c in $order; do
    # shellcheck disable=SC2046
    "$PY" -m tracekit.capture $(args_for "$c") --device cuda --schedule "$SCHED" --set timing_steps=20 \
      --label "$c-$round" -o "$WORK/$c-$round" --force >>"$LOG" 2>&1
    echo "round $round $c: exit $?" | tee -a "$LOG"
  done
done
tar -C "$WORK" -cf "$OUT/gpu_knobs.tar" .
ls -la "$OUT"
rm -rf "$WORK"
