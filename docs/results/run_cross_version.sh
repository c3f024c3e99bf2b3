#!/usr/bin/env bash
# The cross-version result of docs/results/README.md: the seed articles' two benchmarks on the CPU under
# Python 3.9 and 3.11 (same torch 2.8.0, the last release for 3.9), captured with tracekit and diffed.
#
#   docs/results/run_cross_version.sh            # 3.9.18 and 3.11.7 (pyenv); ~3.5 GB download once
#   EXTRA="3.12.1 3.13.0" docs/results/run_cross_version.sh   # also diff 3.12 and 3.13 against 3.9
#
# Not a test (too heavy for CI). What it does:
#  1. a virtual environment per Python at /tmp/venvXY with torch==2.8.0 from the package index (a CUDA
#     build with its nvidia wheels; it runs on the CPU). /etc/xdg/pip caps torch on this machine; 2.8.0
#     is under the cap.
#     tiny_ops (many tiny ops in a Python loop) is added as the case where the interpreter's speed should
#     show: the articles' two benchmarks spend their time in compute and the input pipeline.
#  2. ABBA captures of each workload, so that slow drift of a shared machine falls on both versions:
#     3.9 and 3.11 in one `tracekit capture --python ... --python ...` (runs py3.9, py3.11), then a
#     rerun of each in the reverse order (py3.11-rerun, py3.9-rerun). More steps than the default
#     schedule (20 profiled, 20 timed without the profiler) so that the intervals can be narrow.
#  3. `tracekit diff py3.9 py3.11 py3.9-rerun py3.11-rerun [py3.12 ...]`: each against py3.9, so the
#     report holds the comparison, its replication, and the noise floor (3.9 against 3.9).
#  4. the Markdown and JSON reports, the plot, and each capture's Parquet file if under 2 MB, written
#     into docs/results/cross_version/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TK=("$ROOT/.venv/bin/python" -m tracekit)
PYENV_ROOT=${PYENV_ROOT:-$(pyenv root)}
BASE=${BASE:-3.9.18}
OTHER=${OTHER:-3.11.7}
EXTRA=${EXTRA:-}
TORCH=${TORCH:-2.8.0}
OUT=${OUT:-/tmp/tracekit-cross-version}
RESULTS=${RESULTS:-$ROOT/docs/results/cross_version}
SCHEDULE=${SCHEDULE:-wait=1,warmup=1,active=5,repeat=4}
TIMING_STEPS=${TIMING_STEPS:-20}
WORKLOADS=${WORKLOADS:-heavy_mlp dataloader_train tiny_ops}
# One intra-op thread: on a small shared machine the other cores absorb the rest of its load, and the
# same thread count under every Python keeps the captures comparable (the manifest records it).
export OMP_NUM_THREADS=${THREADS:-1}

venv_for() {  # 3.11.7 -> /tmp/venv311
    local v=$1 mm
    mm=$(echo "$v" | cut -d. -f1,2 | tr -d .)
    echo "/tmp/venv$mm"
}

short() {  # 3.11.7 -> 3.11
    echo "$1" | cut -d. -f1,2
}

ensure_venv() {
    local v=$1 venv
    venv=$(venv_for "$v")
    if [ ! -x "$venv/bin/python" ]; then
        "$PYENV_ROOT/versions/$v/bin/python" -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH')" 2>/dev/null; then
        echo "installing torch==$TORCH into $venv (a large download the first time)" >&2
        "$venv/bin/python" -m pip install -q "torch==$TORCH" numpy
    fi
}

df -h /tmp "$ROOT" >&2
for v in "$BASE" "$OTHER" $EXTRA; do
    ensure_venv "$v"
done

mkdir -p "$OUT" "$RESULTS"
PY_BASE=$(venv_for "$BASE")/bin/python
PY_OTHER=$(venv_for "$OTHER")/bin/python
B=py$(short "$BASE")
O=py$(short "$OTHER")
CAP=(--device cpu --schedule "$SCHEDULE" --set "timing_steps=$TIMING_STEPS" -o "$OUT" --force)

for w in $WORKLOADS; do
    echo "== $w: $B and $O, then reruns in reverse order" >&2
    "${TK[@]}" capture "$w" --python "$PY_BASE" --python "$PY_OTHER" "${CAP[@]}"
    "${TK[@]}" capture "$w" --python "$PY_OTHER" --name "$O-rerun" "${CAP[@]}"
    "${TK[@]}" capture "$w" --python "$PY_BASE" --name "$B-rerun" "${CAP[@]}"
    runs=("$B" "$O" "$B-rerun" "$O-rerun")
    for v in $EXTRA; do
        "${TK[@]}" capture "$w" --python "$(venv_for "$v")/bin/python" "${CAP[@]}"
        runs+=("py$(short "$v")")
    done
    files=()
    for r in "${runs[@]}"; do
        files+=("$r.parquet")
    done
    # Diffed from inside the workload folder, so that the reports name the captures without /tmp paths.
    (
        cd "$OUT/$w"
        "${TK[@]}" diff "${files[@]}" --markdown > "$RESULTS/$w.md"
        "${TK[@]}" diff "${files[@]}" --json > "$RESULTS/$w.json"
        "${TK[@]}" diff "${files[@]}" --plot "$RESULTS/$w.png" --force --width 120 > "$RESULTS/$w.txt"
        for f in "${files[@]}"; do
            size=$(stat -c %s "$f")
            if [ "$size" -lt 2000000 ]; then
                cp "$f" "$RESULTS/${w}_$f"
            else
                echo "not keeping $f ($size bytes > 2 MB)" >&2
            fi
        done
    )
done
echo "results in $RESULTS" >&2
