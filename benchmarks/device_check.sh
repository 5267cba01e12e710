#!/usr/bin/env bash
# The GPU machine's targets (issue 40) in one command, for whoever holds a GPU:
#   1. all five papers at quick size, empty compilation cache (target <= 120 s, every check passing);
#   2. the same again with the warm cache, a new --out (target <= 45 s);
#   3. each paper alone, cold (target: at least 2x faster than the same paper alone on the 2-core CPU, whose times are
#      in benchmarks/README.md);
#   4. XLA programs compiled per paper, and the device each stage ran on (report.md's stage tables).
# Each step stops at its own timeout and the script goes on, printing what it has; the whole stays under 9 minutes
# with the default timeouts. Usage, from the repository root:
#   benchmarks/device_check.sh [JOBS]          # JOBS: --jobs of steps 1-2 (default 5)
# Environment: OUT (scratch, default a new temporary directory), DEVICE_CHECK_TIMEOUTS="cold warm alone" (seconds;
# default "200 90 45"), DEVICE_CHECK_PAPERS (default: every paper). Not installed: the device image has jax (CUDA), equinox, diffrax, optax, xarray, h5py and
# matplotlib; wheels in .whl/ (h5netcdf) are installed to /tmp/site and the source tree is put on PYTHONPATH.
set -uo pipefail
JOBS=${1:-5}
read -r T_COLD T_WARM T_ALONE <<< "${DEVICE_CHECK_TIMEOUTS:-200 90 45}"
source benchmarks/device_env.sh  # DIR, the .whl/ wheels, PYTHONPATH
JAXICL="python3 -m jaxicl.cli"
PAPERS=${DEVICE_CHECK_PAPERS:-$($JAXICL list | awk '{print $1}')}  # a subset, to try the script on a CPU

now() { date +%s.%N; }
# run LABEL TIMEOUT CMD...: the command's wall time, exit status and last line, as one table row
run() {
  local label=$1 limit=$2; shift 2
  local t0 t1 rc
  t0=$(now)
  timeout --kill-after=10 "$limit" "$@" > "$DIR/$label.log" 2>&1  # TERM to the group: --jobs children too
  rc=$?
  t1=$(now)
  local verdict
  verdict=$(grep -E "pass, [0-9]+ fail" "$DIR/$label.log" | tail -1 | sed 's/^\[jaxicl\] //; s/; report:.*//')
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && verdict="stopped at the ${limit} s timeout"
  printf '| %s | %s | %s | %s |\n' "$label" "$(awk "BEGIN {printf \"%.1f\", $t1 - $t0}")" "$rc" "${verdict:-see $DIR/$label.log}"
}

# programs TABLE-REPORT: per paper, the total row of its stage table (device, wall, compile, run, programs, cache hits)
programs() {
  awk '/^## /{paper=$2; sub(":", "", paper)} /^\| total \|/{print "| " paper " " $0}' "$1" 2>/dev/null
}

echo "# device check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
echo "$(nproc) CPUs"; python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
echo
echo "| step | wall (s) | exit status | headline |"
echo "|---|---|---|---|"
run cold-all "$T_COLD" $JAXICL reproduce $PAPERS --quick --jobs "$JOBS" --cache-dir "$DIR/cache-all" --out "$DIR/cold"
run warm-all "$T_WARM" $JAXICL reproduce $PAPERS --quick --jobs "$JOBS" --cache-dir "$DIR/cache-all" --out "$DIR/warm"
for paper in $PAPERS; do
  run "alone-$paper" "$T_ALONE" $JAXICL reproduce "$paper" --quick --jobs 4 --cache-dir "$DIR/cache-$paper" \
    --out "$DIR/alone-$paper"
done
echo
echo "Per paper, cold (all five at once): the total of its stage table"
echo
echo "| paper | stage | device | wall (s) | compile (s) | run (s) | XLA programs | from cache |"
echo "|---|---|---|---|---|---|---|---|"
programs "$DIR/cold/report.md"
echo
echo "Logs and reports: $DIR"
