#!/usr/bin/env bash
# Issue 15's GPU measurements in one call of at most ~9 minutes, the most decisive first, each step under its own
# timeout, every step's output under $OUT (default: a new temporary directory) and on stdout.
#
#   1. Quick-size training programs (bench_transformer.py --config quick): compile seconds and ms/step per model,
#      with the library's GPU default (scans unrolled, GEMM autotuning level 4) and with rolled scans and no
#      autotuning. A quick run trains 700-3,000 steps per model, so compile + steps x ms decides the default.
#   2. On an H100 only (item 4's target is named for one): the paper-size AlgoFormer step in bf16 and float32.
#   3. Every quick reproduction at once, cold (bench_reproduce.py --jobs 8 --cold-only), with the setting of
#      $JAXICL_UNROLL / $JAXICL_TRAINING_AUTOTUNE_LEVEL given to this script (default: the library's), in the time
#      left: per paper, checks, wall, compile and programs (items 1 and 3; the CPU side is in benchmarks/README.md).
#
# Run from the repository root with jax (CUDA), equinox, diffrax, optax, xarray, h5py, h5netcdf and matplotlib
# importable; wheels in .whl/ (h5netcdf) are installed to /tmp/site first. Not installed: the source tree is put on
# PYTHONPATH. TOTAL (seconds, default 560) bounds the whole script.
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
TOTAL=${TOTAL:-560}
T0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
step() { echo "== $1 at +$(( $(date +%s) - T0 )) s (left $(left) s)"; }
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
{ echo "GPU: ${gpu:-none}; $(nproc) CPUs; $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2>/dev/null)"
  python3 -c "import jax, equinox, diffrax, optax; print('jax', jax.__version__, jax.devices(), 'equinox', \
equinox.__version__, 'diffrax', diffrax.__version__, 'optax', optax.__version__)"; } | tee "$OUT/device.txt"

for setting in "on 4 150" "off 0 100"; do  # unroll, autotune level, seconds
  read -r unroll level seconds <<< "$setting"
  step "quick training programs, unroll $unroll, autotune level $level"
  timeout "$seconds" python3 benchmarks/bench_transformer.py --config quick --repeats 3 --unroll "$unroll" \
    --autotune-level "$level" 2>&1 | tee "$OUT/quick_unroll_${unroll}_autotune_${level}.txt"
done

if [[ "$gpu" == *H100* ]]; then
  for dtype in bfloat16 float32; do
    step "paper-size AlgoFormer step, $dtype"
    timeout 90 python3 benchmarks/bench_transformer.py --config paper --dtype "$dtype" --repeats 5 \
      --only algoformer_algoformer $([[ $dtype == bfloat16 ]] && echo --peak-tflops 989) 2>&1 \
      | tee "$OUT/paper_algoformer_$dtype.txt"
  done
fi

t=$(( $(left) - 15 ))
step "every quick reproduction, cold, --jobs 8, ${t} s"
if (( t > 60 )); then
  python3 benchmarks/bench_reproduce.py --platforms gpu --jobs 8 --cold-only --timeout "$t" --stages 2>&1 \
    | tee "$OUT/reproduce_cold.txt"
fi
step done
