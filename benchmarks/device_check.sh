#!/usr/bin/env bash
# The GPU machine's targets for the reproductions in one command, for whoever holds a GPU:
#   1. all five papers at quick size, at once under --jobs JOBS, empty compilation cache (target <= 120 s, every
#      check passing);
#   2. the same again with the warm cache, a new --out (target <= 45 s);
#   3. optionally, each paper alone, cold (target: at least 2x faster than the same paper on the 2-core CPU; each
#      paper's own wall time in steps 1-2 is already an upper bound on it).
#   4. optionally, all five papers at the trained size (`--trained --jobs JOBS`, every trained claim asserted over
#      three seeds), empty compilation cache and no checkpoint (target <= 8 min on one H100); its report, with each
#      paper's wall time, and its log come back with the rest.
# Steps 1-2 are bench_reproduce.py --jobs: its rows are recorded as data (bench_reproduce, benchmarks/results.py; the
# variant names the JAXICL_* settings exported), with each run's stage table (device, wall, compile, run and XLA
# programs per stage). Each step stops at its own timeout; the reports and logs are kept under $DIR/reproduce.
# Usage, from the repository root:
#   benchmarks/device_check.sh [JOBS]          # JOBS: --jobs of steps 1, 2 and 4 (default: half the host's cores;
#                                              # five processes on 16 cores could not go below 158 s: README)
# Environment: OUT (scratch, default a new temporary directory), DEVICE_CHECK_TIMEOUTS="cold warm alone trained"
# (seconds; default "230 100 0 0": cold 0 skips steps 1-2, alone 0 step 3, trained 0 step 4), DEVICE_CHECK_PAPERS
# (default: every paper), JAXICL_BENCH_RESULTS (where the results go: default $OUT/results, packed with the reports
# and logs, text alone, into $OUT/device_check.tgz), JAXICL_UNROLL / JAXICL_TRAINING_AUTOTUNE_LEVEL (how training programs
# compile). Not installed: the device image has jax (CUDA), equinox, diffrax, optax, xarray, h5py and matplotlib;
# wheels in .whl/ (h5netcdf) are installed to /tmp/site and the source tree is put on PYTHONPATH.
set -uo pipefail
JOBS=${1:-$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))}
read -r T_COLD T_WARM T_ALONE T_TRAINED <<< "${DEVICE_CHECK_TIMEOUTS:-230 100 0 0}"
T_TRAINED=${T_TRAINED:-0}
source benchmarks/device_env.sh  # DIR, the .whl/ wheels, PYTHONPATH
export JAXICL_BENCH_RESULTS=${JAXICL_BENCH_RESULTS:-$DIR/results}  # recorded rows, to be copied back
JAXICL="python3 -m jaxicl.cli"
PAPERS=${DEVICE_CHECK_PAPERS:-$($JAXICL list | awk '{print $1}')}  # a subset, to try the script on a CPU

echo "# device check, $(date -u +%Y-%m-%dT%H:%MZ), commit ${JAXICL_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
echo "$(nproc) CPUs"; python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
echo
if [ "$T_COLD" != 0 ]; then
  # shellcheck disable=SC2086
  step together $((T_COLD + T_WARM + 60)) python3 benchmarks/bench_reproduce.py $PAPERS --jobs "$JOBS" \
    --timeout "$T_COLD,$T_WARM" --keep "$DIR/reproduce" --stages
fi
if [ "$T_ALONE" != 0 ]; then
  for paper in $PAPERS; do
    step "alone-$paper" "$T_ALONE" $JAXICL reproduce "$paper" --quick --jobs 4 --cache-dir "$DIR/cache-$paper" \
      --out "$DIR/alone-$paper"
  done
fi
if [ "$T_TRAINED" != 0 ]; then
  # shellcheck disable=SC2086
  step trained "$T_TRAINED" $JAXICL reproduce $PAPERS --trained --jobs "$JOBS" --cache-dir "$DIR/cache-trained" \
    --out "$DIR/trained" --progress
  rm -rf "$DIR/trained"/*/checkpoints
fi
rm -rf "$DIR/reproduce/default/cache" "$DIR"/cache-*
# one file back (a GPU machine returns at most 8 files of at most 16 MiB, two folders down): the results, reports and
# logs, text alone (the data files and figures of a --trained run came to over 16 MiB packed)
(cd "$DIR" && find . -type f \( -name '*.json' -o -name '*.md' -o -name '*.log' -o -name '*.csv' -o -name '*.txt' \) \
  -print0 | tar czf device_check.tgz --null -T -) && echo "Results, reports and logs: $DIR/device_check.tgz"
