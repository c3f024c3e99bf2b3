#!/usr/bin/env bash
# Issue 40 on a multi-GPU machine: the DDP A/B arms of docs/results/ddp/ab.py (base, a slow rank, no
# communication, gradient accumulation with no_sync, a smaller bucket_cap_mb, FSDP2, a user's own FSDP2
# script) captured with NCCL on NPROC GPUs in interleaved rounds. Needs python3 with a CUDA torch and
# tracekit's capture package (tracekit installed, or this repo as the working directory); nothing else.
#
#   OUT=/tmp/out bash docs/results/ddp/run_gpu.sh              # every GPU (2-8), 2 rounds
#   NPROC=2 ROUNDS=1 OUT=/tmp/out bash docs/results/ddp/run_gpu.sh
#   DEVICE=cpu NPROC=2 SMOKE=1 OUT=/tmp/out bash docs/results/ddp/run_gpu.sh   # the same with gloo, on a CPU
#
# Writes $OUT/ddp_<device>_r<round>.tar.gz (the run folders of each round: traces and manifests),
# $OUT/summary.tsv (each run's status and unprofiled step) and $OUT/log.txt; analyse them on any machine
# with `tar xzf ... -C runs && python docs/results/ddp/ab.py report runs`. It starts no capture after
# BUDGET_S seconds (default 420: a call of 8 minutes) and packs what it has.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# NVLink SHARP (multicast) off: not every lent machine allows it, and the runs must not depend on it.
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:?set OUT to a folder}
DEVICE=${DEVICE:-cuda}
ROUNDS=${ROUNDS:-2}
BUDGET_S=${BUDGET_S:-420}
PY=${PYTHON:-python3}
if [ -z "${NPROC:-}" ]; then
  if [ "$DEVICE" = cuda ]; then NPROC=$($PY -c 'import torch; print(min(torch.cuda.device_count(), 8))'); else NPROC=2; fi
fi
if [ "$NPROC" -lt 2 ]; then echo "run_gpu.sh: needs 2 or more GPUs (found $NPROC)" >&2; exit 2; fi
mkdir -p "$OUT"
WORK=$(mktemp -d)
SMOKE_FLAG=()
if [ -n "${SMOKE:-}" ]; then SMOKE_FLAG=(--smoke); fi
{
  echo "run_gpu.sh: device=$DEVICE nproc=$NPROC rounds=$ROUNDS NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST"
  $PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  start=$(date +%s)
  $PY docs/results/ddp/ab.py capture --device "$DEVICE" --nproc "$NPROC" --rounds "$ROUNDS" \
      --budget-s "$BUDGET_S" --python "$PY" --out "$WORK/runs" "${SMOKE_FLAG[@]}" || echo "ab.py capture: status $?"
  echo "run_gpu.sh: captures took $(( $(date +%s) - start )) s"
} > "$OUT/log.txt" 2>&1
$PY docs/results/ddp/ab.py summary "$WORK/runs" > "$OUT/summary.tsv"
for r in $(seq 1 "$ROUNDS"); do
  runs=$(cd "$WORK/runs" && ls -d -- *-"$r" 2>/dev/null || true)
  [ -n "$runs" ] && (cd "$WORK/runs" && tar czf "$OUT/ddp_${DEVICE}_r$r.tar.gz" $runs)
done
rm -rf "$WORK"
cat "$OUT/summary.tsv"
ls -la "$OUT"
