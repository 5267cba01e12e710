#!/usr/bin/env bash
# Every benchmark that records its results (benchmarks/results.py), on a GPU, in one command of under 9 minutes with
# the default timeouts; each step stops at its own timeout and the script goes on. The results are written under
# $OUT/results and packed, with the logs, into $OUT/results.tgz, to be unpacked into benchmarks/ here, then rendered
# (python benchmarks/render.py). Steps, most wanted first:
#   transformer   the papers' transformers at paper size, bf16 (bench_transformer.py --config paper), with the
#                 fraction of the bf16 peak;
#   ensemble      ensembles of 8, for the AlgoFormer and Zhang's GPT-2 (--ensemble 8: the 8-member AlgoFormer
#                 compiles for over two minutes on an H200);
#   sweep, flow   bench_sweep.py, bench_flow.py (the vmapped flows first);
#   ols           bench_ols.py, the least-squares references, on the host, then the GPU (float64 LAPACK there
#                 may not finish in the step's time);
#   yang, ahn, gatmiry   the papers' own benchmarks.
# Usage, from the repository root: JAXICL_BENCH_COMMIT=<commit> benchmarks/device_bench.sh (the commit the results
# name, where the tree travels without its git history).
# Environment: OUT (scratch, default a new temporary directory); PEAK_TFLOPS (the GPU's dense bf16 peak; default 989
# for an H100 or H200 SXM, from nvidia-smi's name); DEVICE_BENCH_TIMEOUTS="transformer ensemble sweep flow ols yang
# ahn gatmiry" (seconds, default "130 80 40 50 30 60 60 70"); DEVICE_BENCH_SIZE=quick runs every step small and in
# float32, to try the script on a CPU.
set -uo pipefail
read -r T_TF T_ENS T_SWEEP T_FLOW T_OLS T_YANG T_AHN T_GAT <<< "${DEVICE_BENCH_TIMEOUTS:-130 80 40 50 30 60 60 70}"
source benchmarks/device_env.sh  # DIR, the .whl/ wheels, PYTHONPATH
export JAXICL_BENCH_RESULTS="$DIR/results" LOGS="$DIR/logs"
mkdir -p "$LOGS" "$JAXICL_BENCH_RESULTS"
if [ "${DEVICE_BENCH_SIZE:-paper}" = quick ]; then
  TF="--config quick --dtype float32" K=2 FLOW="--dims 5 --n-traj 50 --repeats 1" OLS="--prompts 16 --d 5 --M 41"
  REP="--repeats 1" SKIP_YANG="--skip-sweep" SKIP_AHN="--skip-target" SKIP_GAT="--skip-grid"
else
  TF="--config paper --dtype bfloat16" K=8 FLOW="--repeats 2" OLS="--prompts 256" REP="--repeats 3" SKIP_YANG=""
  SKIP_AHN="" SKIP_GAT=""
fi
TF="$TF --repeats 3${PEAK:+ --peak-tflops $PEAK}"
echo "# device bench, $(date -u +%Y-%m-%dT%H:%MZ), commit ${JAXICL_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
echo "GPU: ${GPU:-none}; $(nproc) CPUs; peak for the fraction: ${PEAK:-not given} TFLOP/s; size ${DEVICE_BENCH_SIZE:-paper}"
echo
B=benchmarks
# shellcheck disable=SC2086
{
step transformer "$T_TF" python3 $B/bench_transformer.py $TF
step ensemble "$T_ENS" python3 $B/bench_transformer.py $TF --only algoformer_algoformer,zhang --ensemble $K
step sweep "$T_SWEEP" python3 $B/bench_sweep.py $REP
step flow "$T_FLOW" python3 $B/bench_flow.py $FLOW
step ols "$T_OLS" python3 $B/bench_ols.py $OLS
step yang "$T_YANG" python3 $B/bench_yang.py $REP $SKIP_YANG
step ahn "$T_AHN" python3 $B/bench_ahn.py $REP $SKIP_AHN
step gatmiry "$T_GAT" python3 $B/bench_gatmiry.py $REP $SKIP_GAT
}
# one file back (a GPU machine returns a few files only): the results and the logs
tar czf "$DIR/results.tgz" -C "$DIR" results logs 2>/dev/null && rm -rf "$DIR/results" "$DIR/logs"
echo "Results and logs: $DIR/results.tgz ($(tar tzf "$DIR/results.tgz" 2>/dev/null | grep -c json) results)"
