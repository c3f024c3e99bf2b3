#!/usr/bin/env bash
# The captures behind docs/results/memory.md: each model once as the baseline (with memory events and
# module spans) and once per change that tracekit's memory what-if predicts (tracekit.whatif.memory):
# batch × 2, AMP (bf16), activation checkpointing, gradient accumulation, the largest batch that fits in
# a budget (the batch that `tracekit memory BASE --fit-gib X` predicts, captured), and one run that must
# run out of memory (the capture's OOM result). Straight through the capture package
# (python3 -m tracekit.capture), plus `python3 -m tracekit memory` once for the fitted batch.
#
#   OUT=/some/dir bash docs/results/memory/run_gpu.sh            # on one GPU (about 6 minutes on an H100)
#   ONLY="mlp dataloader" OUT=/some/dir bash docs/results/memory/run_gpu.sh   # some families (3.5 min)
#   ONLY="resnet gpt2" OUT=/other/dir bash docs/results/memory/run_gpu.sh     # the others (3 min)
#   SMOKE=1 OUT=/tmp/mem bash docs/results/memory/run_gpu.sh     # tiny sizes on the CPU (a minute)
#   RUNS="mlp_base mlp_b2" bash docs/results/memory/run_gpu.sh   # a subset (names below)
#
# Writes under $OUT (at most 8 files, none in a folder):
#   mlp.tar, dataloader.tar, resnet.tar, gpt2.tar, vit.tar   the run folders: rank0.<time>.pt.trace.json.gz + manifest.json
#   measured.json   per run: family, what changed, status (an OOM's line), unprofiled step ms, and the
#                   allocator's peaks over the unprofiled timed steps (max_memory_allocated / _reserved);
#                   `boundary`: what reading the allocator at a step boundary costs (benchmarks/memory_stats_cost.py)
#   log.txt         the captures' own output
# Then, here: python docs/results/memory/table.py $OUT [$OUT2] --save fixtures/h100_memory
# (writes docs/results/memory.md's tables; --save keeps the run folders for the tests and the page)
# A model whose package is missing (torchvision, transformers) is skipped and says so.
set -u
cd "$(dirname "$0")/../../.."
OUT="${OUT:-docs/results/memory/data}"
PY="${PYTHON:-python3}"
SMOKE="${SMOKE:-}"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"
MODELS=docs/results/memory/models.py
# Three profiled steps: the first begins with the warm-up step's device work still queued (launched before
# the trace: the replay keeps it as observed, so its step is no model of the others); the median step is a
# later one. The unprofiled timed steps give the measured peaks and times; the dataloader runs time more of
# them, since their loader stalls once per prefetch depth (8 batches) and the step they are paced at is a
# mean over several stalls.
SCHED="wait=0,warmup=1,active=3,repeat=1"
COMMON="--set timing_warmup=2 --set timing_steps=5"
DL_TIMED="--set timing_steps=24"
ONLY="${ONLY:-}"

if [ -n "$SMOKE" ]; then
  DEVICE=cpu
  MLP="--set batch_size=256 --set in_features=256 --set hidden=256 --set layers=4 --set out_features=64"
  MLP_B2="--set batch_size=512"; MLP_GA="--set batch_size=64 --set grad_accum=4"; MLP_OOM=""
  DL="--set num_workers=0 --set batch_size=256"; DL_B2="--set batch_size=512"; DL_GA="--set batch_size=128 --set grad_accum=2"
  RESNET="--model resnet18 --batch 4 --size 64"; RESNET_B2="--batch 8"
  GPT="--model gpt2-tiny --batch 2 --seq 64"; GPT_B2="--batch 4"
  VIT="--model vit_tiny_patch16_224 --batch 2 --size 64"; VIT_B2="--batch 4"
  FIT_GIB=0.004
else
  DEVICE=cuda
  MLP="--set batch_size=2048"
  MLP_B2="--set batch_size=4096"; MLP_GA="--set batch_size=512 --set grad_accum=4"; MLP_OOM="--set batch_size=4194304"
  DL="--set batch_size=1024"; DL_B2="--set batch_size=2048"; DL_GA="--set batch_size=512 --set grad_accum=2"
  RESNET="--model resnet50 --batch 64"; RESNET_B2="--batch 128"
  GPT="--model gpt2 --batch 8 --seq 512"; GPT_B2="--batch 16"
  VIT="--model vit_small_patch16_224 --batch 64"; VIT_B2="--batch 128"
  FIT_GIB=8
fi
ALL_RUNS="mlp_base mlp_b2 mlp_amp mlp_ckpt4 mlp_ga4 mlp_fit mlp_oom dl_base dl_b2 dl_amp dl_ckpt2 dl_ga2
resnet_base resnet_b2 resnet_amp resnet_ckpt4 gpt2_base gpt2_b2 gpt2_amp gpt2_ckpt vit_base vit_b2 vit_amp vit_ckpt"
RUNS="${RUNS:-$ALL_RUNS}"

spec_of() {  # run name -> "family|capture arguments|script arguments" (a workload and --set flags, or --script)
  case "$1" in
    mlp_base)     echo "mlp|heavy_mlp $MLP --set with_stack=true" ;;
    mlp_b2)       echo "mlp|heavy_mlp $MLP $MLP_B2" ;;
    mlp_amp)      echo "mlp|heavy_mlp $MLP --set amp=true --set amp_dtype=bfloat16" ;;
    mlp_ckpt4)    echo "mlp|heavy_mlp $MLP --set checkpoint=4" ;;
    mlp_ga4)      echo "mlp|heavy_mlp $MLP $MLP_GA" ;;
    mlp_fit)      echo "mlp|heavy_mlp $MLP --set batch_size=$(fit_batch mlp_base)" ;;
    mlp_oom)      echo "mlp|heavy_mlp $MLP $MLP_OOM" ;;
    dl_base)      echo "dataloader|dataloader_train $DL $DL_TIMED --set with_stack=true" ;;
    dl_b2)        echo "dataloader|dataloader_train $DL $DL_TIMED $DL_B2" ;;
    dl_amp)       echo "dataloader|dataloader_train $DL $DL_TIMED --set amp=true --set amp_dtype=bfloat16" ;;
    dl_ckpt2)     echo "dataloader|dataloader_train $DL $DL_TIMED --set checkpoint=2" ;;
    dl_ga2)       echo "dataloader|dataloader_train $DL $DL_TIMED $DL_GA" ;;
    resnet_base)  echo "resnet|--set with_stack=true --script $MODELS|$RESNET" ;;
    resnet_b2)    echo "resnet|--script $MODELS|$RESNET $RESNET_B2" ;;
    resnet_amp)   echo "resnet|--script $MODELS|$RESNET --amp bf16" ;;
    resnet_ckpt4) echo "resnet|--script $MODELS|$RESNET --checkpoint 4" ;;
    gpt2_base)    echo "gpt2|--set with_stack=true --script $MODELS|$GPT" ;;
    gpt2_b2)      echo "gpt2|--script $MODELS|$GPT $GPT_B2" ;;
    gpt2_amp)     echo "gpt2|--script $MODELS|$GPT --amp bf16" ;;
    gpt2_ckpt)    echo "gpt2|--script $MODELS|$GPT --checkpoint 1" ;;
    vit_base)     echo "vit|--set with_stack=true --script $MODELS|$VIT" ;;
    vit_b2)       echo "vit|--script $MODELS|$VIT $VIT_B2" ;;
    vit_amp)      echo "vit|--script $MODELS|$VIT --amp bf16" ;;
    vit_ckpt)     echo "vit|--script $MODELS|$VIT --checkpoint 1" ;;
    *) return 1 ;;
  esac
}

fit_batch() {  # the batch `tracekit memory` predicts fits in $FIT_GIB GiB, from a captured baseline (or nothing)
  "$PY" -m tracekit memory "$WORK/$1" --fit-gib "$FIT_GIB" --no-time --json 2>>"$LOG" | "$PY" -c '
import json, sys
try:
    d = json.load(sys.stdin)["prediction"]["devices"][0]
except ValueError:
    sys.exit(0)
print(d["fit_batch_size"] or "")' 2>>"$LOG"
}

has() { "$PY" -c "import $1" >/dev/null 2>&1; }

"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no gpu')" 2>&1 | tee -a "$LOG"
# what reading the allocator at every step boundary costs (the capture's, and what it did before)
"$PY" benchmarks/memory_stats_cost.py >"$WORK/boundary.json" 2>>"$LOG" || echo '{}' >"$WORK/boundary.json"
cat "$WORK/boundary.json" | tee -a "$LOG"
for run in $RUNS; do
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" ${run%%_*} "* ]] && [[ "$run" != dl_* || " $ONLY " != *" dataloader "* ]]; then
    continue  # a family ONLY leaves out (before spec_of: mlp_fit's spec runs tracekit memory on mlp_base)
  fi
  spec="$(spec_of "$run")" || { echo "unknown run $run; choose from: $ALL_RUNS" | tee -a "$LOG"; continue; }
  IFS='|' read -r family args script_args <<<"$spec"
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $family "* ]]; then continue; fi
  case "$family" in
    resnet) has torchvision || { echo "== $run: skipped, no torchvision" | tee -a "$LOG"; continue; } ;;
    gpt2) has transformers || { echo "== $run: skipped, no transformers" | tee -a "$LOG"; continue; } ;;
    vit) has timm || { echo "== $run: skipped, no timm" | tee -a "$LOG"; continue; } ;;
  esac
  [ "$run" = mlp_oom ] && [ "$DEVICE" = cpu ] && { echo "== $run: skipped on the CPU" | tee -a "$LOG"; continue; }
  if [ "$run" = mlp_fit ] && [[ "$args" == *"batch_size= "* || "$args" == *"batch_size=" ]]; then
    echo "== $run: skipped, no fitted batch (did mlp_base run? see tracekit memory's error above)" | tee -a "$LOG"
    continue
  fi
  tail=()
  [ -n "$script_args" ] && tail=(-- $script_args --device "$DEVICE")  # the script's own flags
  echo "== $run ($family): $PY -m tracekit.capture $args ${tail[*]}" | tee -a "$LOG"
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$PY" -m tracekit.capture --device "$DEVICE" --schedule "$SCHED" $COMMON --set profile_memory=true \
    --label "$run" -o "$WORK/$run" --force $args "${tail[@]}" >>"$LOG" 2>&1
  echo "   exit status $? after $(( $(date +%s) - start )) s" | tee -a "$LOG"
  [ -d "$WORK/$run" ] && echo "$family" >"$WORK/$run/family.txt"
done

"$PY" - "$WORK" "$OUT/measured.json" "$FIT_GIB" "$DEVICE" <<'PYEOF' | tee -a "$LOG"
"""measured.json: each run's settings, status and the allocator's peaks over its unprofiled timed steps."""
import json, os, statistics, sys
work, dest, fit_gib, device = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
runs = {}
boundary = json.load(open(os.path.join(work, "boundary.json")))
for run in sorted(os.listdir(work)):
    d = os.path.join(work, run)
    if not os.path.isdir(d):
        continue
    path = os.path.join(d, "manifest.json")
    fam = os.path.join(d, "family.txt")
    family = open(fam).read().strip() if os.path.exists(fam) else None
    if not os.path.exists(path):
        runs[run] = {"family": family, "status": "no manifest"}
        continue
    m = json.load(open(path))
    rec = m["ranks"][0]
    un = rec["unprofiled"]
    alloc = un.get("allocator") or {}
    peaks = [p for p in alloc.get("allocated_peak") or [] if p is not None]
    reserved = [p for p in alloc.get("reserved_peak") or [] if p is not None]
    steps = m.get("unprofiled_step_ms") or []
    traces = [f for f in os.listdir(d) if f.endswith(".pt.trace.json.gz")]
    runs[run] = {
        "family": family,
        "status": m["status"],
        "error": m.get("error"),
        "oom": m.get("oom"),
        "workload": m.get("workload"),
        "knobs_set": m.get("knobs_set"),
        "script_args": (m.get("script") or {}).get("args"),
        "samples_per_step": m.get("samples_per_step"),
        "unprofiled_step_ms_median": statistics.median(steps) if steps else None,
        # unprofiled timed steps: the allocator's own figures, its peaks reset at every step boundary
        "allocated_peak_bytes": max(peaks) if peaks else None,  # None on the CPU: the trace's are used
        "reserved_peak_bytes": max(reserved) if reserved else None,
        "allocator": alloc,
        "model": (rec.get("memory") or {}).get("model"),
        "device_total_bytes": (m.get("device") or {}).get("total_memory_bytes"),
        "trace_bytes": sum(os.path.getsize(os.path.join(d, f)) for f in traces),
    }
    print(f"{run:14s} {m['status']:10s} step {runs[run]['unprofiled_step_ms_median']} ms, peak {runs[run]['allocated_peak_bytes']}")
with open(dest, "w") as fh:
    json.dump({"device": device, "fit_gib": fit_gib, "boundary": boundary, "runs": runs}, fh, indent=1, sort_keys=True)
PYEOF

for family in mlp dataloader resnet gpt2 vit; do
  dirs=$(cd "$WORK" && grep -lx "$family" */family.txt 2>/dev/null | xargs -r -n1 dirname)
  [ -n "$dirs" ] && tar -C "$WORK" -cf "$OUT/$family.tar" $dirs
done
ls -la "$OUT" | tee -a "$LOG"
for f in "$OUT"/*.tar; do
  [ -e "$f" ] && [ "$(stat -c %s "$f")" -gt 16000000 ] && echo "warning: $f is over 16 MB" | tee -a "$LOG"
done
rm -rf "$WORK"
