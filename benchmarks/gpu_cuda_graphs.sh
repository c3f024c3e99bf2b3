#!/usr/bin/env bash
# The A/B pairs of issue 20 (docs/results/whatif.md, "CUDA graphs and torch.compile"), captured with the
# workloads' own knobs and the default schedule (two profiler cycles): the host-bound MLP and the seed MLP
# eager vs cuda_graphs=true, the host-bound MLP compiled (torch.compile, default mode; and once with the
# compile inside the profiled steps), dataloader_train as a graph; then benchmarks/graph_floor.py --device
# (one graph launch's host time, graphed vs eager weights). ROUNDS repeats the host-bound pair. WORK: where
# the run folders go (default: a temporary folder).
#
#   OUT=/some/dir bash benchmarks/gpu_cuda_graphs.sh          # H200: ~2.5 min
#
# Writes $OUT/cuda_graphs.tar.gz (one folder per run: traces + manifest.json), $OUT/summary.tsv, $OUT/log.txt.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/data/gpu_cuda_graphs}"
PY="${PYTHON:-python3}"
TIMED="${TIMED:-30}"
ROUNDS="${ROUNDS:-2}"
WORK="${WORK:-$(mktemp -d)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"; : >"$LOG"
HB="--set hidden=512 --set layers=24 --set batch_size=64 --set in_features=512 --set out_features=512 --set optimizer=sgd"
FIRST="--set timing_warmup=0 --set timing_steps=0 --schedule wait=0,warmup=0,active=4,repeat=1"
args_for() {
  case "$1" in
    hb_eager*)  echo "heavy_mlp $HB" ;;
    hb_graph*)  echo "heavy_mlp $HB --set cuda_graphs=true" ;;
    seed_eager) echo "heavy_mlp" ;;
    seed_graph) echo "heavy_mlp --set cuda_graphs=true" ;;
    hb_compile) echo "heavy_mlp $HB --set compile=true" ;;
    hb_compile_first) echo "heavy_mlp $HB --set compile=true $FIRST" ;;
    dl_graph)   echo "dataloader_train --set cuda_graphs=true --set timing_steps=10" ;;
    *) return 1 ;;
  esac
}
RUNS="hb_eager hb_graph seed_eager seed_graph floor hb_compile hb_compile_first dl_graph"
for r in $(seq 2 "$ROUNDS"); do RUNS="$RUNS hb_eager_r$r hb_graph_r$r"; done
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a "$LOG"
for run in $RUNS; do
  if [ "$run" = floor ]; then
    timeout 90 "$PY" benchmarks/graph_floor.py --device 2>&1 | tee "$OUT/graph_floor_device.txt" | tail -5
    continue
  fi
  spec="$(args_for "$run")" || { echo "unknown run $run" | tee -a "$LOG"; continue; }
  t0=$(date +%s.%N)
  echo "== $run: $spec" | tee -a "$LOG"
  timeout 120 "$PY" -m tracekit.capture --set timing_steps=$TIMED $spec -o "$WORK/$run" --force >>"$LOG" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  ms=$("$PY" -c "import json,statistics as s;d=json.load(open('$WORK/$run/manifest.json'));print(round(s.median(d['unprofiled_step_ms']),3))" 2>/dev/null || echo "-")
  printf '%s\trc=%s\t%.1fs\tunprofiled_median_ms=%s\n' "$run" "$rc" "$("$PY" -c "print($t1 - $t0)")" "$ms" | tee -a "$OUT/summary.tsv"
done
tar -C "$WORK" -czf "$OUT/cuda_graphs.tar.gz" .
ls -la "$OUT"
