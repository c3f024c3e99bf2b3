#!/usr/bin/env bash
# The GPU knob comparison of docs/results/gpu_knobs/: from the run folders that benchmarks/gpu_knobs.sh
# captured on an H200 (through the device tool: `OUT=$OUT bash benchmarks/gpu_knobs.sh`), parse each run
# and diff the pooled repeats of each configuration:
#   num_workers 4 (the article's default) vs 0; pin_memory on vs off; heavy_mlp AMP off vs on.
#
#   docs/results/run_gpu_knobs.sh path/to/gpu_knobs.tar   # parse the runs, then diff
#   docs/results/run_gpu_knobs.sh                         # re-diff the captures already committed
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TK=("$ROOT/.venv/bin/python" -m tracekit)
TAR=${1:+$(realpath "$1")}  # without it: re-diff the Parquet captures already in $RESULTS
RESULTS=${RESULTS:-$ROOT/docs/results/gpu_knobs}
mkdir -p "$RESULTS"
cd "$RESULTS"
if [ -n "$TAR" ]; then
    tar -xf "$TAR"
    for d in dl_* mlp_*; do
        [ -d "$d" ] || continue
        "${TK[@]}" parse "$d" -o "$d.parquet" --force >/dev/null
        rm -r "$d"
    done
fi
pool() { ls "$1"-*.parquet | sort -V | paste -sd, -; }
for pair in "dl_workers4 dl_workers0 num_workers" "dl_workers4 dl_nopin pin_memory" "mlp_fp32 mlp_amp amp"; do
    read -r a b name <<<"$pair"
    D=("${TK[@]}" diff "$(pool "$a")" "$(pool "$b")" --compare "$name")
    "${D[@]}" --markdown >"$name.md"
    "${D[@]}" --json >"$name.json"
    "${D[@]}" --width 130 >"$name.txt"
    "${D[@]}" --plot "$name.png" --force >/dev/null
done
ls -la "$RESULTS"
