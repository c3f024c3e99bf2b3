#!/usr/bin/env bash
# Loader-bound captures and their counterparts, for checking `tracekit whatif`'s input-pipeline producer
# (tracekit.whatif.loader) against real runs (docs/results/whatif.md, "The input pipeline"). Default
# schedule unless named; only torch (+ torchvision for the ResNet script) is needed on the target.
#
#   OUT=/some/dir bash benchmarks/loader_pairs.sh                 # all runs (H200: ~3 min)
#   RUNS="dl_w2 dl_gpu" OUT=... bash benchmarks/loader_pairs.sh
#   DEVICE=cpu RUNS="dl_w1 dl_w0 dl_cpu_gpu" OUT=... bash benchmarks/loader_pairs.sh   # the CPU pairs
#
# Runs: resnet_w3 (ResNet-50 bf16, FakeData + transforms, 3 workers), resnet_w3_active8 (the same with
# active=8: a window longer than its 6-batch prefetch depth, for the profiler's cost of such a schedule),
# resnet_gpu (the same model on a batch kept on the GPU), dl_w2 / dl_w8 (dataloader_train with CPU-heavy
# samples, image_size=$IMG, 2 and 8 workers), dl_gpu (its batch kept on the device); on CPU dl_w1 / dl_w0
# (1 worker / loading in the training process) and dl_cpu_gpu.
# Writes $OUT/<run>.tar (traces + manifest.json), $OUT/summary.tsv (median unprofiled step and loader wait).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/data/loader_pairs}"
PY="${PYTHON:-python3}"
TIMED="${TIMED:-10}"
IMG="${IMG:-160}"
DEVICE="${DEVICE:-}"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"; : >"$LOG"
DL="dataloader_train --set image_size=$IMG --set log_every=0"
DLCPU="dataloader_train --set image_size=128 --set batch_size=16 --set features=64 --set hidden=64 --set log_every=0 --set dataset_size=4096"
RUNS="${RUNS:-resnet_w3 resnet_gpu dl_w2 dl_w8 dl_gpu resnet_w3_active8}"
args_for() {
  case "$1" in
    resnet_w3)         echo "--script benchmarks/scripts/resnet_loader.py -- --workers 3" ;;
    resnet_w3_active8) echo "--schedule wait=1,warmup=1,active=8,repeat=2 --script benchmarks/scripts/resnet_loader.py -- --workers 3" ;;
    resnet_gpu)        echo "--script benchmarks/scripts/resnet_loader.py -- --on-gpu" ;;
    dl_w2)             echo "$DL --set num_workers=2" ;;
    dl_w8)             echo "$DL --set num_workers=8" ;;
    dl_gpu)            echo "$DL --set num_workers=2 --set batch_on_device=true" ;;
    dl_w1)             echo "$DLCPU --set num_workers=1" ;;
    dl_w0)             echo "$DLCPU --set num_workers=0" ;;
    dl_cpu_gpu)        echo "$DLCPU --set num_workers=1 --set batch_on_device=true" ;;
    *) return 1 ;;
  esac
}
dev=""; [ -n "$DEVICE" ] && dev="--device $DEVICE"
"$PY" -c "import sys, os, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cpus', os.cpu_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')" 2>&1 | tee -a "$LOG"
for run in $RUNS; do
  spec="$(args_for "$run")" || { echo "unknown run $run" | tee -a "$LOG"; continue; }
  pre="${spec%% -- *}"; post=""; [ "$pre" != "$spec" ] && post="-- ${spec#* -- }"
  t0=$(date +%s.%N)
  echo "== $run: $pre $dev --set timing_steps=$TIMED $post" | tee -a "$LOG"
  timeout 120 "$PY" -m tracekit.capture $pre $dev --set timing_steps=$TIMED -o "$WORK/$run" --force $post >>"$LOG" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  fig=$("$PY" -c "
import json, statistics as s
d = json.load(open('$WORK/$run/manifest.json'))
w = d.get('unprofiled_loader_wait_ms')
print(round(s.median(d['unprofiled_step_ms']), 3), round(s.median(w), 3) if w else '-', sep='\t')" 2>/dev/null || printf -- '-\t-')
  printf '%s\trc=%s\t%.1fs\tunprofiled_step_ms=%s\n' "$run" "$rc" "$("$PY" -c "print($t1 - $t0)")" "$fig" | tee -a "$OUT/summary.tsv"
  tar -C "$WORK" -cf "$OUT/$run.tar" "$run"
done
ls -la "$OUT"
