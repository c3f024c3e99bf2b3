#!/usr/bin/env bash
# The advice rules' A/B pairs on one GPU (issue 39): docs/results/advice/pairs.py, then its run folders
# packed for the trip back. From the repository root:
#
#   OUT=$OUT bash docs/results/advice/run_gpu.sh          # on the GPU machine (~6-8 minutes on one H100)
#   SMOKE=1 OUT=/tmp/advice bash docs/results/advice/run_gpu.sh   # a quick try on a CPU (~1 minute)
#
# Writes at most 8 files under $OUT: results.json (every timed step, each pair's ratios), log.txt, and
# runs_<n>.tar (n ≤ 6, each ≤ 15 MiB): the run folders runs/<config>/ (trace + manifest.json). Here:
#   docs/results/advice/make_table.py --tars runs_*.tar results.json   # parse, predict, write the table
# BUDGET_S (default 330): start no group of pairs after that many seconds; LIMIT_S (default 450) stops
# the measurement outright; what finished is still written and packed. PAIR_GROUPS (default all:
# loader,resnet,r50,sync,host) and ROUNDS / STEPS / CAPTURES pass through.
set -u
cd "$(dirname "$0")/../../.."
OUT="${OUT:?set OUT to the folder that comes back}"
PY="${PYTHON:-python3}"
BUDGET_S="${BUDGET_S:-330}"
LIMIT_S="${LIMIT_S:-450}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
ARGS=(--out "$WORK" --budget-s "$BUDGET_S" --groups "${PAIR_GROUPS:-loader,resnet,r50,sync,host}")
[ "${SMOKE:-0}" = 1 ] && ARGS+=(--smoke)
[ -n "${ROUNDS:-}" ] && ARGS+=(--rounds "$ROUNDS")
[ -n "${STEPS:-}" ] && ARGS+=(--steps "$STEPS")
[ -n "${CAPTURES:-}" ] && ARGS+=(--captures "$CAPTURES")
{
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'); import os; print('cpus', os.cpu_count(), 'affinity', len(os.sched_getaffinity(0)))"
  timeout -s INT "$LIMIT_S" "$PY" docs/results/advice/pairs.py "${ARGS[@]}"
  echo "pairs.py exit status $?"
} 2>&1 | grep -v '^USDT:' >"$OUT/log.txt"
cp "$WORK/results.json" "$OUT/results.json" 2>/dev/null || echo "no results.json" >>"$OUT/log.txt"
# the run folders into at most 6 tars of at most 15 MiB (largest first into the first that has room)
"$PY" - "$WORK/runs" "$OUT" >>"$OUT/log.txt" 2>&1 <<'PYEOF'
import os, sys, tarfile
runs, out = sys.argv[1], sys.argv[2]
LIMIT, MAX_TARS = 15 * 2**20, 6
def size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
folders = sorted(((size(os.path.join(runs, n)), n) for n in os.listdir(runs)), reverse=True) if os.path.isdir(runs) else []
bins = []
for sz, name in folders:
    for b in bins:
        if b[0] + sz <= LIMIT:
            b[0] += sz; b[1].append(name); break
    else:
        if len(bins) < MAX_TARS and sz <= LIMIT:
            bins.append([sz, [name]])
        else:
            print(f"left out: runs/{name} ({sz} bytes): no room in {MAX_TARS} tars of {LIMIT} bytes")
for i, (sz, names) in enumerate(bins, 1):
    with tarfile.open(os.path.join(out, f"runs_{i}.tar"), "w") as tf:
        for n in sorted(names):
            tf.add(os.path.join(runs, n), arcname=f"runs/{n}")
    print(f"runs_{i}.tar: {sz} bytes, {', '.join(sorted(names))}")
PYEOF
ls -la "$OUT" >>"$OUT/log.txt"
tail -30 "$OUT/log.txt"
rm -rf "$WORK"
