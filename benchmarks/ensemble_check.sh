#!/usr/bin/env bash
# The GPU measurements of issue 41 in one command, for whoever holds a GPU (under 9 minutes with the default
# timeouts; each step stops at its own timeout and the script goes on, printing what it has):
#   1. paper-size training steps in bf16, one model and the largest ensemble that fits (bench_transformer.py
#      --ensemble auto), AlgoFormer and Zhang GPT-2: aggregate throughput and the fraction of the bf16 peak;
#   2. Zhang Fig. 1's least-squares references at paper size, SVD against Gram, on the GPU and the host CPU
#      (bench_ols.py);
#   3. the --full training plans of the three papers that train transformers (jaxicl reproduce NAME --full --plan),
#      their theory stages skipped where a flag allows it;
#   4. the AlgoFormer's Fig. 2 regression at paper size for two --budget slices (the second resumes the first).
# Usage, from the repository root: benchmarks/ensemble_check.sh
# Environment: OUT (scratch, default a new temporary directory); PEAK_TFLOPS (the GPU's dense bf16 peak; default:
# 989 for an H100 or H200 SXM, from nvidia-smi's name, else none); ENSEMBLE_CHECK_TIMEOUTS="bench ols plan slice"
# (seconds, default "200 60 150 60").
set -uo pipefail
read -r T_BENCH T_OLS T_PLAN T_SLICE <<< "${ENSEMBLE_CHECK_TIMEOUTS:-200 60 150 60}"
source benchmarks/device_env.sh  # DIR, the .whl/ wheels, PYTHONPATH
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in *H100*|*H200*) PEAK=${PEAK_TFLOPS:-989} ;; *) PEAK=${PEAK_TFLOPS:-} ;; esac
PEAK_ARG=${PEAK:+--peak-tflops $PEAK}
step() {  # step LABEL TIMEOUT CMD...: the command's output to the log and the terminal, its wall time and status
  local label=$1 limit=$2; shift 2
  local t0 rc
  t0=$(date +%s.%N)
  echo "## $label"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$DIR/$label.log" | grep -v "it/s\]\|step/s\]"
  rc=${PIPESTATUS[0]}
  echo "($label: $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s, exit status $rc)"
  echo
}
echo "# ensemble check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "GPU: ${GPU:-none}; $(nproc) CPUs; peak for the fraction: ${PEAK:-not given} TFLOP/s"
echo
# shellcheck disable=SC2086
step bench-one "$((T_BENCH / 2))" python3 benchmarks/bench_transformer.py --config paper --dtype bfloat16 \
  --only algoformer_algoformer --repeats 2 $PEAK_ARG
# shellcheck disable=SC2086
step bench-ensembles "$T_BENCH" bash -c "python3 benchmarks/bench_transformer.py --config paper --dtype bfloat16 \
  --only algoformer_algoformer --ensemble auto --repeats 2 $PEAK_ARG; python3 benchmarks/bench_transformer.py \
  --config paper --dtype bfloat16 --only zhang --ensemble auto --repeats 2 $PEAK_ARG; python3 \
  benchmarks/bench_transformer.py --config paper --dtype bfloat16 --only zhang --repeats 2 $PEAK_ARG"
step ols "$T_OLS" python3 benchmarks/bench_ols.py --prompts 1024
for paper in algoformer yang2024 zhang2023; do
  step "plan-$paper" "$((T_PLAN / 3))" python3 -m jaxicl.cli reproduce "$paper" --full --plan --out "$DIR/plan" \
    --cache-dir "$DIR/cache"
done
grep -h -A40 "Training plan" "$DIR/plan/report.md" 2>/dev/null | head -60
for slice in 1 2; do
  step "slice-$slice" "$((T_SLICE / 2))" python3 -m jaxicl.cli reproduce algoformer --full --budget 0.3 \
    --out "$DIR/slices" --cache-dir "$DIR/cache" --progress
done
echo "Logs and reports: $DIR"
