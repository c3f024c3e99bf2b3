#!/usr/bin/env bash
# The GPU knob comparison of docs/results/gpu_knobs/: from the run folders that benchmarks/gpu_knobs.sh
# captured on an H200 (through the device tool: `OUT=$OUT bash benchmarks/gpu_knobs.sh`), parse each run
# and diff the pooled repeats of each configuration:
#   num_workers 4 (the article's default) vs 0; pin_memory on vs off; heavy_mlp AMP off vs on.
#
#   docs/results/run_gpu_knobs.sh path/to/gpu_knobs.tar
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TK=("$ROOT/.venv/bin/python" -m tracekit)
TAR=$(realpath "$1")
RESULTS=${RESULTS:-$ROOT/docs/results/gpu_knobs}
mkdir -p "$RESULTS"
cd "$RESULTS"
tar -xf "$TAR"
for d in dl_* mlp_*; do
    [ -d "$d" ] || continue
    "${TK[@]}" parse "$d" -o "$d.parquet" --force >/dev/null
    rm -r "$d"
done
pool() { ls "$1"-*.parquet | sort -V | paste -sd, -; }
for pair in "dl_workers4 dl_workers0 num_workers" "dl_workers4 dl_nopin pin_memory" "mlp_fp32 mlp_amp amp"; do
    read -r a b name <<<"$pair"
    "${TK[@]}" diff "$(pool "$a")" "$(pool "$b")" --markdown >"$name.md"
    "${TK[@]}" diff "$(pool "$a")" "$(pool "$b")" --json >"$name.json"
    "${TK[@]}" diff "$(pool "$a")" "$(pool "$b")" --width 130 >"$name.txt"
    "${TK[@]}" diff "$(pool "$a")" "$(pool "$b")" --plot "$name.png" --force >/dev/null
done
ls -la "$RESULTS"
