#!/usr/bin/env bash
# The what-if A/B pairs of docs/results/whatif/: from the tars that benchmarks/whatif_pairs.sh wrote on an
# H200 (through the device tool: `ROUNDS=4 BUDGET_S=450 OUT=$OUT bash benchmarks/whatif_pairs.sh`), parse
# each run folder into <config>-<round>.parquet (its manifest.json goes into the Parquet metadata), then
# write the measured table (summary.md, pairs.json) with docs/results/whatif_pairs.py.
#
#   docs/results/run_whatif_pairs.sh path/to/whatif_r1.tar path/to/whatif_r2.tar ...   # parse, then summarise
#   docs/results/run_whatif_pairs.sh                                                  # re-summarise
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY="$ROOT/.venv/bin/python"
TARS=()
for t in "$@"; do TARS+=("$(realpath "$t")"); done
RESULTS=${RESULTS:-$ROOT/docs/results/whatif}
mkdir -p "$RESULTS"
cd "$RESULTS"
for tar in "${TARS[@]}"; do
    for d in $(tar -tf "$tar" | grep -E '^(\./)?[^/]+/manifest\.json$' | xargs -n1 dirname); do
        d=${d#./}
        tar -xf "$tar" "$d" 2>/dev/null || tar -xf "$tar" "./$d"
        "$PY" -m tracekit parse "$d" -o "$d.parquet" --force >/dev/null
        chmod 644 "$d.parquet"
        rm -r "$d"
    done
done
"$PY" "$ROOT/docs/results/whatif_pairs.py" "$RESULTS"
