# Sourced by the device scripts (device_check.sh, ensemble_check.sh), from the repository root: a scratch directory
# DIR ($OUT, else a new temporary one), the wheels in .whl/ (h5netcdf: not in the device image) installed to
# /tmp/site, and the source tree on PYTHONPATH.
DIR=${OUT:-$(mktemp -d)}
mkdir -p "$DIR"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
