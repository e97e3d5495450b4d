#!/usr/bin/env bash
# Runs the GPU half of the project on a lent GPU host (no internet): installs the carried wheels
# (.whl/: mcp, pydantic, ... for cp312) into /tmp/site, then runs the steps named as arguments
# (default: all), collecting results under $OUT (one tarball) and bench/results/.
#   bash tools/gpu/run_on_device.sh [devices] [tests] [fidelity] [conv3d] [verify_latency] [profile] [compile]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/r"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/r/pip.log" 2>&1 || { echo "wheel install failed"; tail -20 "$OUT/r/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 EVOKERNEL_HOME=/tmp/evohome
steps=${*:-devices suite gpumarks fidelity conv3d profile compile}
step() {  # name timeout cmd...
  local name=$1 t=$2; shift 2
  case " $steps " in *" $name "*) ;; *) return 0;; esac
  echo "=== $name ($(date -u +%H:%M:%S))"
  timeout "$t" "$@" > "$OUT/r/$name.log" 2>&1
  echo "--- $name rc=$? ; tail:"; tail -n 12 "$OUT/r/$name.log"
}
step devices 120 python3 bench/query_devices.py
step suite 400 bash tools/gpu_suite.sh
step gpumarks 300 python3 -m pytest -q -rA -m gpu -p no:cacheprovider --timeout 240 ${GPU_TESTS:-tests/devices tests/compile tests/benchmark tests/profile tests/e2e}
step fidelity 420 python3 bench/timing_fidelity.py ${FIDELITY_ARGS:-}
step conv3d 200 python3 bench/conv3d_baseline.py
step profile 300 python3 bench/profile_check.py
step compile 200 python3 bench/compile_latency.py
cp -r bench/results "$OUT/r/bench_results" 2>/dev/null
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$OUT/r"
echo "results in results.tgz"
