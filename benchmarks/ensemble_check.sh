#!/usr/bin/env bash
# The GPU measurements of issue 41 in one command, for whoever holds a GPU (under 9.5 minutes with the default
# timeouts; each step stops at its own timeout and the script goes on, printing what it has):
#   1. paper-size training steps in bf16 (bench_transformer.py), each model in a step of its own, alone and as an
#      ensemble: Zhang's GPT-2 first, its members batched (ZHANG_K, default 48: the largest measured to fit in 75 %
#      of an H200; 'auto': the largest that fits, from one compilation), then the AlgoFormer with 8 members in turn
#      (batched, its 8-member program compiled in 142 s for the same throughput): aggregate throughput and the
#      fraction of the bf16 peak;
#   2. Zhang Fig. 1's least-squares references at paper size, SVD against Gram, on the GPU and the host CPU
#      (bench_ols.py);
#   3. the --full training plans of the papers that train transformers (jaxicl reproduce NAME --full --plan); zhang2023's
#      is its --full report too: every theory stage, Fig. 1's references, and the plan of its GPT-2 ensembles;
#   4. the AlgoFormer's Fig. 2 regression at paper size (--set parts=["regression"], Fig. 3 reduced to Fig. 2's
#      model) for two --budget slices: the second resumes the first from its checkpoints.
# The steps come in order of what they measure, most wanted first; zhang2023's --full report is the longest and last.
# Usage, from the repository root: benchmarks/ensemble_check.sh
# Environment: OUT (scratch, default a new temporary directory; the reports are under $OUT/plan-NAME and $OUT/slices);
# PEAK_TFLOPS (the GPU's dense bf16 peak; default: 989 for an H100 or H200 SXM, from nvidia-smi's name, else none);
# ENSEMBLE_CHECK_TIMEOUTS="bench-zhang bench-algoformer ols slice-1 slice-2 plan-algoformer plan-yang zhang" (seconds,
# default "85 55 25 60 45 35 55 190": the whole under 9.5 minutes; a slice's --budget is its timeout less 15 s for the
# report); ENSEMBLE_CHECK_SIZE=quick runs every step at quick size in float32, to try the script on a CPU (default:
# paper); JAXICL_BENCH_COMMIT: the commit measured, where the tree travels without its git history.
set -uo pipefail
read -r T_BENCH_Z T_BENCH_A T_OLS T_SLICE1 T_SLICE2 T_PLAN_A T_PLAN_Y T_ZHANG \
  <<< "${ENSEMBLE_CHECK_TIMEOUTS:-85 55 25 60 45 35 55 190}"
source benchmarks/device_env.sh  # DIR, the .whl/ wheels, PYTHONPATH
export JAXICL_BENCH_RESULTS="$DIR/results"  # benchmarks that record their results write them here, to be copied back
if [ "${ENSEMBLE_CHECK_SIZE:-paper}" = quick ]; then
  BENCH="--config quick --dtype float32" SIZE=--quick OLS="--prompts 64 --d 5 --M 41" K=4  # host memory: no auto
  ZHANG_FIG1="--set fig1=true"  # quick size leaves Fig. 1's GPT-2 out, and a --plan with nothing to time is refused
else
  # the AlgoFormer: 8 members in turn (the largest that fits batched, 35 on an H200, compiles for minutes)
  BENCH="--config paper --dtype bfloat16" SIZE=--full OLS="--prompts 256" K=${ZHANG_K:-48}
fi
BENCH="$BENCH --repeats 2${PEAK:+ --peak-tflops $PEAK}"
REPRODUCE="python3 -m jaxicl.cli reproduce --cache-dir $DIR/cache"  # (timeout runs commands, not shell functions)
bench() { python3 benchmarks/bench_transformer.py $BENCH "$@"; }
echo "# ensemble check, $(date -u +%Y-%m-%dT%H:%MZ), commit ${JAXICL_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
echo "GPU: ${GPU:-none}; $(nproc) CPUs; peak for the fraction: ${PEAK:-not given} TFLOP/s; size ${SIZE#--}"
echo
export -f bench
export BENCH
step bench-zhang "$T_BENCH_Z" bash -c "bench --only zhang --ensemble 1,$K"  # one process per model
step bench-algoformer "$T_BENCH_A" bash -c "bench --only algoformer_algoformer --ensemble 1,8 --batch-members off"
# shellcheck disable=SC2086
step ols "$T_OLS" python3 benchmarks/bench_ols.py $OLS
T_SLICES=("$T_SLICE1" "$T_SLICE2")
for slice in 1 2; do  # chunks of 200 steps, so that a slice of a minute trains several
  limit=${T_SLICES[$((slice - 1))]}
  step "slice-$slice" "$limit" $REPRODUCE algoformer "$SIZE" --set 'parts=["regression"]' --set chunk=200 \
    --set "fig3_loops=[$(python3 -c "from jaxicl.experiments import algoformer as A; print(list(A.SIZES['${SIZE#--}'].loops))")]" \
    --budget "$(awk "BEGIN {print ($limit - 15) / 60}")" --out "$DIR/slices" --progress
done
step plan-algoformer "$T_PLAN_A" $REPRODUCE algoformer "$SIZE" --plan --out "$DIR/plan-algoformer"
step plan-yang "$T_PLAN_Y" $REPRODUCE yang2024 "$SIZE" --plan --out "$DIR/plan-yang2024"
step zhang-full "$T_ZHANG" $REPRODUCE zhang2023 "$SIZE" ${ZHANG_FIG1:-} --plan --out "$DIR/plan-zhang2023" --progress
for paper in algoformer yang2024 zhang2023; do
  grep -h -A20 "Training plan" "$DIR/plan-$paper/report.md" 2>/dev/null
done
grep -h "partial\|resum" "$DIR/slices/report.md" "$DIR"/slice-*.log 2>/dev/null | grep -v "it/s\]" | head -12
echo "Logs and reports: $DIR"
