#!/usr/bin/env bash
# The GPU cross-version study of docs/results/gpu_python_versions.md: on the GPU machine (one H200, torch
# 2.11, only Python 3.12 installed), CPython 3.10, 3.11, 3.12 and 3.13 built the same way (pyenv: no
# PGO/LTO, shared libpython) run the machine's own torch (../shared/device-pythons/README.md says how), and
# `tracekit capture --repeat` runs each workload under all of them, interleaved, with the calibration in
# every manifest. Capture only (--no-parse): the run folders come back and are parsed and diffed here.
#
#   PYDIR=.dev/slim TOOLS=.dev/tools OUT=/tmp/pyruns BUDGET_S=330 STUDIES="heavy_mlp system" \
#       docs/results/run_gpu_python_versions.sh
#
# PYDIR holds py-<version>.tar.xz made by build.sh and repacked by slim_device_python.sh (without numpy,
# which no workload uses, and with stripped libraries, so that four fit in one call). BUDGET_S bounds the captures' wall time: a
# workload whose runs (estimated from the runs so far) would not fit is skipped whole and named in
# OUT/plan.txt, so that no workload is left with unbalanced rounds.
set -u
PYDIR=${PYDIR:-.dev/pythons}
TOOLS=${TOOLS:-.dev/tools}
OUT=${OUT:-/tmp/pyruns}
BUDGET_S=${BUDGET_S:-330}
REPEAT=${REPEAT:-6}
VERSIONS=${VERSIONS:-3.10.13 3.11.7 3.12.1 3.13.0}
mkdir -p "$OUT"
T0=$(date +%s)
PER_RUN_S=${PER_RUN_S:-8}  # the first estimate, replaced by what the runs took

bash "$TOOLS/setup_on_device.sh" "$PYDIR" $VERSIONS 2>&1 | tee -a "$OUT/plan.txt"
VERSIONS_A=($VERSIONS)
ALL=()
for v in $VERSIONS; do
    xy=$(echo "$v" | cut -d. -f1,2 | tr -d .)
    ALL+=(--python "/tmp/py$xy")
done
TWO=("${ALL[@]:0:4}")  # 3.10 and 3.11: the step in which CPython's interpreter got its speed-up
# The machine's own python3 (Ubuntu's build): what its manifest would record about the build.
python3 -c 'import json, sys; from tracekit.capture.environment import python_info; print(json.dumps(python_info()))' \
    > "$OUT/system_python.json"
echo "setup done after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/plan.txt"

fits() {  # fits RUNS: whether RUNS more runs fit in the budget at the pace so far
    local need=$(($1 * PER_RUN_S + 10))
    [ $(($(date +%s) - T0 + need)) -le "$BUDGET_S" ]
}

study() {  # study NAME N_INTERPRETERS WORKLOAD [capture args...]
    local name=$1 n=$2; shift 2
    local runs=$((n * REPEAT)) t
    if ! fits "$runs"; then
        echo "SKIPPED $name ($n interpreters): $runs runs at about $PER_RUN_S s each do not fit in the" \
            "$((BUDGET_S - $(date +%s) + T0)) s of the budget left" | tee -a "$OUT/plan.txt"
        return 1
    fi
    echo "RUN $name: $* --repeat $REPEAT ($runs runs)" | tee -a "$OUT/plan.txt"
    t=$(date +%s)
    python3 -m tracekit capture "$@" --repeat "$REPEAT" --no-parse -o "$OUT/$name" >> "$OUT/log.txt" 2>&1
    echo "  exit $? after $(( $(date +%s) - t )) s" | tee -a "$OUT/plan.txt"
    PER_RUN_S=$(( ($(date +%s) - t + runs - 1) / runs ))
}

HOSTBOUND=(--set hidden=512 --set layers=24 --set batch_size=64 --set in_features=512 --set out_features=512
           --set optimizer=sgd)
# STUDIES picks what this call runs (a device call is at most 10 minutes: the whole study takes three), in
# order of what the study needs most; a workload that does not fit under all the interpreters is tried
# under 3.10 and 3.11 alone.
STUDIES=${STUDIES:-tiny_ops heavy_mlp dataloader_train hostbound system}
for s in $STUDIES; do
    case $s in
        tiny_ops|heavy_mlp|dataloader_train)
            study "$s" "${#VERSIONS_A[@]}" "$s" "${ALL[@]}" || study "$s" 2 "$s" "${TWO[@]}" ;;
        hostbound)
            study hostbound "${#VERSIONS_A[@]}" heavy_mlp "${HOSTBOUND[@]}" "${ALL[@]}" \
                || study hostbound 2 heavy_mlp "${HOSTBOUND[@]}" "${TWO[@]}" ;;
        system)
            # The machine's own python3 (Ubuntu's PGO+LTO build of 3.12) beside pyenv's 3.12.1, interleaved,
            # for the build note: the same version built two ways.
            REPEAT=${SYSTEM_REPEAT:-3} study system 2 tiny_ops --python "$(command -v python3)" --python /tmp/py312 ;;
        *) echo "unknown study $s" | tee -a "$OUT/plan.txt" ;;
    esac
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a "$OUT/plan.txt"
