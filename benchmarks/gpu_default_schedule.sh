#!/usr/bin/env bash
# Captures made the way a new user makes them: the default schedule (wait=1,warmup=1,active=3,repeat=2,
# i.e. two profiler cycles, two trace files per rank), the seed workloads and real models as user scripts
# (benchmarks/scripts/). Only torch (+ torchvision/transformers for two scripts) is needed on the target.
#
#   OUT=/some/dir bash benchmarks/gpu_default_schedule.sh          # all runs (H200: ~6 min)
#   RUNS="heavy_mlp mlp_graph" OUT=... bash benchmarks/gpu_default_schedule.sh
#
# Writes $OUT/default_schedule.tar (one folder per run: traces + manifest.json), $OUT/summary.tsv, $OUT/log.txt.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/data/gpu_default}"
PY="${PYTHON:-python3}"
TIMED="${TIMED:-20}"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"; : >"$LOG"
HB="--set hidden=512 --set layers=24 --set batch_size=64 --set in_features=512 --set out_features=512 --set optimizer=sgd"
ALL_RUNS="tiny_ops heavy_mlp dataloader_train heavy_mlp_hostbound mlp_eager mlp_graph mlp_compile
mlp_graph_seed resnet_loader resnet_gpu gpt2"
RUNS="${RUNS:-$ALL_RUNS}"
args_for() {
  case "$1" in
    tiny_ops|heavy_mlp|dataloader_train) echo "$1" ;;
    heavy_mlp_hostbound) echo "heavy_mlp $HB" ;;
    mlp_eager)      echo "--script benchmarks/scripts/mlp_modes.py -- --mode eager" ;;
    mlp_graph)      echo "--script benchmarks/scripts/mlp_modes.py -- --mode graph" ;;
    mlp_compile)    echo "--script benchmarks/scripts/mlp_modes.py -- --mode compile" ;;
    mlp_graph_seed) echo "--script benchmarks/scripts/mlp_modes.py -- --mode graph --hidden 4096 --layers 8 --batch 256 --in 1024 --out 512" ;;
    resnet_loader)  echo "--script benchmarks/scripts/resnet_loader.py -- --workers 3" ;;
    resnet_gpu)     echo "--script benchmarks/scripts/resnet_loader.py -- --on-gpu" ;;
    gpt2)           echo "--script benchmarks/scripts/gpt2_bf16.py" ;;
    *) return 1 ;;
  esac
}
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a "$LOG"
for run in $RUNS; do
  spec="$(args_for "$run")" || { echo "unknown run $run" | tee -a "$LOG"; continue; }
  # the --set/--schedule flags go before a script's `--`
  pre="${spec%% -- *}"; post=""; [ "$pre" != "$spec" ] && post="-- ${spec#* -- }"
  t0=$(date +%s.%N)
  echo "== $run: $pre --set timing_steps=$TIMED $post" | tee -a "$LOG"
  timeout 240 "$PY" -m tracekit.capture $pre --set timing_steps=$TIMED -o "$WORK/$run" --force $post >>"$LOG" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  ms=$("$PY" -c "import json,statistics as s;d=json.load(open('$WORK/$run/manifest.json'));print(round(s.median(d['unprofiled_step_ms']),3))" 2>/dev/null || echo "-")
  printf '%s\trc=%s\t%.1fs\tunprofiled_median_ms=%s\t%s\n' "$run" "$rc" "$("$PY" -c "print($t1 - $t0)")" "$ms" "$(du -sh "$WORK/$run" 2>/dev/null | cut -f1)" | tee -a "$OUT/summary.tsv"
done
tar -C "$WORK" -cf "$OUT/default_schedule.tar" .
ls -la "$OUT"
