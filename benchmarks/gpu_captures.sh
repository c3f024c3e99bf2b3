#!/usr/bin/env bash
# GPU captures of the seed workloads and the "slow on purpose" variants, straight through the capture
# package (python3 -m tracekit.capture: stdlib + torch only, no pandas/pyarrow/typer/msgspec/rich needed).
#
#   OUT=/some/dir bash benchmarks/gpu_captures.sh            # from the repo root; all runs
#   RUNS="heavy_mlp tiny_ops" bash benchmarks/gpu_captures.sh  # a subset (names below)
#
# Writes at most 4 files under $OUT (default benchmarks/data/gpu, git-ignored), none deeper than $OUT/x:
#   $OUT/gpu_captures.tar   every run folder: <run>/rank<r>.<time>.pt.trace.json.gz + manifest.json
#   $OUT/summary.tsv        one line per run: status, unprofiled step ms, samples/s, peak memory, trace bytes
#   $OUT/log.txt            the captures' own output (progress lines, errors)
# The ddp_slow_rank1 run needs 2 GPUs (device kind nvidia-h200-x2); with fewer it is skipped and says so.
# Each capture: 2 untimed + 5 timed unprofiled steps, then wait=1,warmup=1,active=3,repeat=1 (one trace
# per rank); sizes keep every gzip trace well under 2 MB (the script warns about any that is not).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/data/gpu}"
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"  # DEVICE=cpu tries the script out on a CPU box (CPU default sizes, gloo DDP)
SCHED="${SCHED:-wait=1,warmup=1,active=3,repeat=1}"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: >"$LOG"

ALL_RUNS="heavy_mlp heavy_mlp_amp dataloader_train dataloader_workers0 dataloader_nopin dataloader_slow
sync_per_layer tiny_ops ddp_slow_rank1 sync_heavy article_heavy_mlp article_dataloader"
RUNS="${RUNS:-$ALL_RUNS}"

args_for() {  # run name -> workload and --set flags
  case "$1" in
    heavy_mlp)           echo "heavy_mlp" ;;  # the article's sizes: 1024→4096 (8×4096²)→512, batch 256
    heavy_mlp_amp)       echo "heavy_mlp --set amp=true" ;;
    dataloader_train)    echo "dataloader_train" ;;  # num_workers=4, pin_memory, batch 128
    dataloader_workers0) echo "dataloader_train --set num_workers=0" ;;
    dataloader_nopin)    echo "dataloader_train --set pin_memory=false" ;;
    dataloader_slow)     echo "dataloader_train --set sample_sleep_ms=0.5 --set num_workers=0 --set batch_size=32" ;;
    sync_per_layer)      echo "heavy_mlp --set sync_every_layer=true --set in_features=512 --set hidden=512 --set layers=16 --set out_features=512 --set batch_size=64 --set with_stack=true" ;;
    tiny_ops)            echo "tiny_ops --set n_ops=300 --set with_stack=true" ;;
    ddp_slow_rank1)      echo "heavy_mlp --set nproc=2 --set slow_rank=1 --set slow_ms=20" ;;
    # the article's MLP with an .item() after every layer: kernels long enough that the host waits in sync
    sync_heavy)          echo "heavy_mlp --set sync_every_layer=true --set with_stack=true" ;;
    # the articles' own timing: 500 iterations after 10 warm-up (heavy_mlp); most of an epoch (dataloader)
    article_heavy_mlp)   echo "heavy_mlp --set timing_steps=500 --set timing_warmup=10" ;;
    article_dataloader)  echo "dataloader_train --set timing_steps=70 --set timing_warmup=5" ;;
    *) return 1 ;;
  esac
}

"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')" 2>&1 | tee -a "$LOG"
NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"

for run in $RUNS; do
  spec="$(args_for "$run")" || { echo "unknown run $run; choose from: $ALL_RUNS" | tee -a "$LOG"; continue; }
  if [ "$run" = ddp_slow_rank1 ] && [ "$DEVICE" = cuda ] && [ "${NGPU:-0}" -lt 2 ]; then
    echo "== $run: skipped, needs 2 GPUs (found ${NGPU:-0}); use device kind nvidia-h200-x2" | tee -a "$LOG"
    continue
  fi
  echo "== $run: $PY -m tracekit.capture $spec --device $DEVICE --schedule $SCHED" | tee -a "$LOG"
  # shellcheck disable=SC2086
  "$PY" -m tracekit.capture $spec --device "$DEVICE" --schedule "$SCHED" --label "$run" -o "$WORK/$run" --force \
    >>"$LOG" 2>&1
  echo "   exit status $?" | tee -a "$LOG"
done

"$PY" - "$WORK" "$OUT/summary.tsv" <<'PYEOF' | tee -a "$LOG"
import json, os, statistics, sys
work, dest = sys.argv[1], sys.argv[2]
cols = ["run", "status", "world_size", "unprofiled_step_ms_median", "samples_per_s", "peak_memory_mib",
        "profiled_host_step_ms_median", "trace_files", "largest_trace_bytes", "error"]
rows = []
for run in sorted(os.listdir(work)):
    d = os.path.join(work, run)
    path = os.path.join(d, "manifest.json")
    if not os.path.exists(path):
        rows.append([run, "no manifest"] + [""] * (len(cols) - 2))
        continue
    m = json.load(open(path))
    ms = m["unprofiled_step_ms"]
    med = statistics.median(ms) if ms else None
    gsps = m.get("global_samples_per_step")
    prof = m["ranks"][0]["profiled"]["host_step_ms"]
    traces = [f for f in os.listdir(d) if f.endswith(".pt.trace.json.gz")]
    sizes = [os.path.getsize(os.path.join(d, f)) for f in traces]
    if sizes and max(sizes) > 2_000_000:
        print(f"warning: {run}: a trace is {max(sizes)} bytes (> 2 MB); shrink its sizes")
    peak = m.get("peak_memory_bytes")
    rows.append([run, m["status"], m["world_size"], f"{med:.3f}" if med else "",
                 f"{gsps / med * 1e3:.1f}" if med and gsps else "",
                 f"{peak / 2**20:.1f}" if peak else "",
                 f"{statistics.median(prof):.3f}" if prof else "", len(traces), max(sizes) if sizes else 0,
                 (m.get("error") or "").replace("\t", " ").replace("\n", " | ")[:300]])
with open(dest, "w") as fh:
    for r in [cols] + rows:
        fh.write("\t".join(map(str, r)) + "\n")
for r in [cols] + rows:
    print("\t".join(map(str, r)))
PYEOF

tar -C "$WORK" -cf "$OUT/gpu_captures.tar" .
ls -la "$OUT" | tee -a "$LOG"
rm -rf "$WORK"
