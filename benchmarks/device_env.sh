# Sourced by the device scripts (device_check.sh, ensemble_check.sh, device_bench.sh), from the repository root: a
# scratch directory DIR ($OUT, else a new temporary one), the wheels in .whl/ (h5netcdf: not in the device image)
# installed to /tmp/site, the source tree on PYTHONPATH, the GPU's name and dense bf16 peak (GPU, PEAK: $PEAK_TFLOPS,
# else 989 TFLOP/s for an H100 or H200 SXM) and `step`, which runs one step of a script under its own timeout.
DIR=${OUT:-$(mktemp -d)}
mkdir -p "$DIR"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in *H100*|*H200*) PEAK=${PEAK_TFLOPS:-989} ;; *) PEAK=${PEAK_TFLOPS:-} ;; esac
# step LABEL TIMEOUT CMD...: the command's output to its log (in $LOGS, else $DIR) and the terminal, less progress
# bars, then its wall time and exit status
step() {
  local label=$1 limit=$2; shift 2
  local t0 rc
  t0=$(date +%s.%N)
  echo "## $label"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "${LOGS:-$DIR}/$label.log" \
    | grep --line-buffered -v "it/s\]\|step/s\]\|%/s\]"
  rc=${PIPESTATUS[0]}
  echo "($label: $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s, exit status $rc)"
  echo
}
