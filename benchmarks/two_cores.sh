#!/bin/bash
# Issue 22's figures on two CPUs of another machine, pinned (`taskset`): the parse (CPU per GB, fixed
# start-up, against msgspec in the same runs), the analysis' phases and its savings' share, and each
# command's CPU and peak memory. Written for the GPU hosts the device tool lends (bare of this dev VM's
# lazily backed memory, whose page faults cost 2-10x from minute to minute: benchmarks/RESULTS.md).
#
#   benchmarks/two_cores.sh OUTDIR [BEFORE_TREE]
#
# LARGE_MB and QUARTER_MB (default 1024, 256) size the traces. CPUS (default: the two fastest CPUs of different cores, by benchmarks/cpu_speed.py) picks the CPUs;
# PYTHON (default python3) the interpreter, which needs tracekit's dependencies. BEFORE_TREE: another
# checkout (its C extensions are built here) run alternately with this one by bench_parse.py,
# analyze_phases.py (one process each, alternately) and bench_commands.py. Every line of output goes
# to OUTDIR/two_cores.log too; the traces are generated under DATA (default OUTDIR/data; 1.3 GB).
# benchmarks/startup.py runs first, as the environment is; everything after it with Python's bytecode
# cached in a fresh temporary folder (PYTHONPYCACHEPREFIX): the lent host's image sets
# PYTHONDONTWRITEBYTECODE and has no .pyc for numpy or anything else, so each process there would
# compile every module it imports from source (0.2 s more per start), which a pip install (it compiles
# what it installs) does not.
set -euo pipefail
out=${1:?usage: benchmarks/two_cores.sh OUTDIR [BEFORE_TREE]}
before=${2:-}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
data=${DATA:-$out/data}
mkdir -p "$out" "$data"
exec > >(tee "$out/two_cores.log") 2>&1

for tree in "$here" ${before:+"$before"}; do
    (cd "$tree" && $py setup.py -q build_ext --inplace >/dev/null 2>&1) || { echo "C extensions: build failed in $tree"; exit 1; }
done
if [ -z "${CPUS:-}" ]; then
    CPUS=$($py - <<'EOF'
import json, subprocess, sys
rows = json.loads(subprocess.run([sys.executable, "benchmarks/cpu_speed.py", "--seconds", "0.3", "--json"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()[0])
picked, cores = [], set()
for r in sorted(rows, key=lambda r: r["ns_median"]):
    if r["siblings"] not in cores:
        picked.append(r["cpu"]); cores.add(r["siblings"])
    if len(picked) == 2:
        break
print(",".join(map(str, picked)))
EOF
)
fi
pin=(taskset -c "$CPUS")
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); pinned to CPUs $CPUS"
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?'), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null || echo '?')"
echo "python: $($py -c 'import sys, numpy, pyarrow; print(sys.version.split()[0], "numpy", numpy.__version__, "pyarrow", pyarrow.__version__)')"
dirty=$(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null | head -1)
echo "this tree: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')${dirty:+ with uncommitted changes}${before:+; before: $before}"
echo "== start-up (startup.py, pinned; PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-})"
"${pin[@]}" $py benchmarks/startup.py --repeat 9
unset PYTHONDONTWRITEBYTECODE
PYTHONPYCACHEPREFIX=$(mktemp -d)
export PYTHONPYCACHEPREFIX
trap 'rm -rf "$PYTHONPYCACHEPREFIX"' EXIT

$py benchmarks/gen_large_trace.py --size-mb "${LARGE_MB:-1024}" -o "$data/large.pt.trace.json" >/dev/null
$py benchmarks/gen_large_trace.py --size-mb "${QUARTER_MB:-256}" -o "$data/quarter.pt.trace.json" >/dev/null

echo "== parse (bench_parse.py, pinned)"
"${pin[@]}" $py benchmarks/bench_parse.py fixtures/h200_probe/tiny.pt.trace.json.gz \
    "$data/quarter.pt.trace.json" "$data/large.pt.trace.json" --repeat 5 --reference \
    ${before:+--source "$before"}

"${pin[@]}" $py -m tracekit parse "$data/large.pt.trace.json" -o "$data/large.parquet" --force >/dev/null
echo "== analysis phases (analyze_phases.py, pinned, --repeat 3)"
for round in 1 2; do
    for tree in "$here" ${before:+"$before"}; do
        echo "-- $tree (round $round)"
        (cd "$tree" && PYTHONPATH="$tree" "${pin[@]}" $py "$here/benchmarks/analyze_phases.py" \
            "$data/large.parquet" --repeat 3 | tail -10)
    done
done
echo "== commands (bench_commands.py, pinned)"
"${pin[@]}" $py benchmarks/bench_commands.py "$data/large.parquet" --repeat 3 ${before:+--against "$before"}
