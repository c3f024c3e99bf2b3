#!/usr/bin/env bash
# The cross-version result of docs/results/README.md: the seed articles' two benchmarks (and tiny_ops)
# on the CPU under Python 3.9 and 3.11 (same torch 2.8.0, the last release for 3.9), captured with
# tracekit and diffed.
#
#   docs/results/run_cross_version.sh                          # 3.9.18 and 3.11.7 (pyenv)
#   EXTRA="3.12.1 3.13.0" docs/results/run_cross_version.sh    # also 3.12 and 3.13 against 3.9
#   REPORT_ONLY=1 EXTRA="3.12.1 3.13.0" docs/results/run_cross_version.sh   # re-diff the captures in OUT
#
# Not a test (too heavy for CI; about 3.5 GB of downloads the first time). What it does:
#  1. A virtual environment per Python at /tmp/venvXY with torch==2.8.0 from the package index (a CUDA
#     build with its nvidia wheels; it runs on the CPU). /etc/xdg/pip caps torch on this machine; 2.8.0
#     is under the cap.
#  2. ROUNDS rounds of captures, alternating the order of the interpreters from round to round
#     (3.9 3.11 | 3.11 3.9 | ...), so that slow drift of a shared machine falls on every version alike.
#     Each capture records 20 profiled steps and 20 steps timed without the profiler. One intra-op
#     thread (the manifest records it), and the captures run at a raised priority: SCHED_FIFO (chrt) for
#     the single-threaded heavy_mlp and tiny_ops, nice -10 for dataloader_train (its worker processes
#     would otherwise hold every core at real-time priority).
#  3. Two reports per workload, from inside the capture folder (no /tmp paths in them):
#     <workload>.{md,json,txt,png}: the runs of each version pooled (`tracekit diff A1,A2 B1,B2 ...`),
#         each version against 3.9 — the result;
#     <workload>_runs.{md,json,txt}: every single run of BASE and OTHER against the first BASE run — the
#         other BASE runs there are the noise floor: what one run against one run calls a change when
#         nothing changed.
#  4. Each capture's Parquet file is kept beside the reports if it is under 2 MB (all runs of every
#     version: the pooled reports can be recomputed from them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TK=("$ROOT/.venv/bin/python" -m tracekit)
PYENV_ROOT=${PYENV_ROOT:-$(pyenv root)}
BASE=${BASE:-3.9.18}
OTHER=${OTHER:-3.11.7}
EXTRA=${EXTRA:-}
TORCH=${TORCH:-2.8.0}
ROUNDS=${ROUNDS:-4}  # 4 runs per version: the fewest for a 95 % interval run against run
OUT=${OUT:-/tmp/tracekit-cross-version}
RESULTS=${RESULTS:-$ROOT/docs/results/cross_version}
SCHEDULE=${SCHEDULE:-wait=1,warmup=1,active=5,repeat=4}
TIMING_STEPS=${TIMING_STEPS:-20}
WORKLOADS=${WORKLOADS:-heavy_mlp dataloader_train tiny_ops}
export OMP_NUM_THREADS=${THREADS:-1}

venv_for() { # 3.11.7 -> /tmp/venv311
    echo "/tmp/venv$(echo "$1" | cut -d. -f1,2 | tr -d .)"
}

short() { # 3.11.7 -> 3.11
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

priority() { # the command prefix that raises a workload's priority (plain if not permitted)
    if [ "$1" = dataloader_train ]; then
        nice -n -10 true 2>/dev/null && echo "nice -n -10"
    else
        chrt -f 10 true 2>/dev/null && echo "chrt -f 10"
    fi
}

df -h /tmp "$ROOT" >&2
VERSIONS=("$BASE" "$OTHER" $EXTRA)
if [ "${REPORT_ONLY:-0}" != 1 ]; then
    for v in "${VERSIONS[@]}"; do
        ensure_venv "$v"
    done
fi
mkdir -p "$OUT" "$RESULTS"

for w in $WORKLOADS; do
    read -r -a PRIO <<<"$(priority "$w")"
    # REPORT_ONLY=1: only the diffs, from the captures already in $OUT
    for round in $(if [ "${REPORT_ONLY:-0}" = 1 ]; then true; else seq 1 "$ROUNDS"; fi); do
        order=("${VERSIONS[@]}")
        if [ $((round % 2)) -eq 0 ]; then # reversed every other round
            order=()
            for ((i = ${#VERSIONS[@]} - 1; i >= 0; i--)); do order+=("${VERSIONS[i]}"); done
        fi
        for v in "${order[@]}"; do
            echo "== $w round $round: Python $v (${PRIO[*]:-normal priority})" >&2
            "${PRIO[@]}" "${TK[@]}" capture "$w" --python "$(venv_for "$v")/bin/python" \
                --name "py$(short "$v")-$round" --device cpu --schedule "$SCHEDULE" \
                --set "timing_steps=$TIMING_STEPS" -o "$OUT" --force
        done
    done
    (
        cd "$OUT/$w"
        pooled=()
        singles=()
        for v in "${VERSIONS[@]}"; do
            runs=""
            for round in $(seq 1 "$ROUNDS"); do
                f="py$(short "$v")-$round.parquet"
                runs="${runs:+$runs,}$f"
                if [ "$v" = "$BASE" ] || [ "$v" = "$OTHER" ]; then
                    singles+=("$f")
                fi
            done
            pooled+=("$runs")
        done
        # every single run against the first run of the base version
        "${TK[@]}" diff "${singles[@]}" --markdown >"$RESULTS/${w}_runs.md"
        "${TK[@]}" diff "${singles[@]}" --json >"$RESULTS/${w}_runs.json"
        "${TK[@]}" diff "${singles[@]}" --width 120 >"$RESULTS/${w}_runs.txt"
        # the runs of each version pooled, each version against the base version
        "${TK[@]}" diff "${pooled[@]}" --markdown >"$RESULTS/$w.md"
        "${TK[@]}" diff "${pooled[@]}" --json >"$RESULTS/$w.json"
        "${TK[@]}" diff "${pooled[@]}" --plot "$RESULTS/$w.png" --force --width 120 >"$RESULTS/$w.txt"
        for f in py*-[0-9]*.parquet; do
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
