#!/usr/bin/env bash
# One device call of session 3 (issue 11 first): install the carried wheels and bubblewrap, show the
# isolation level, run the GPU-marked tests of the new runtime (faults included) and the latency bench.
#   bash tools/gpu/session3.sh [steps...]   (steps: iso tests latency selftest journey ab kb)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
for d in .whl/*.deb; do dpkg -x "$d" /tmp/bw; done
export EVOKERNEL_BWRAP=/tmp/bw/usr/bin/bwrap PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 EVOKERNEL_HOME=/tmp/evohome
steps=${*:-iso tests latency}
has() { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
if has iso; then
  echo "=== isolation"; $EVOKERNEL_BWRAP --version; which setpriv; uname -r; nvidia-smi -L
  python3 - <<'PY'
import time, os
from evokernel_mcp.runtime.spares import Spares
for lvl in ("bwrap+uid", "bwrap", "process"):
    from evokernel_mcp.runtime.spares import Child
    t = time.time()
    try:
        c = Child("cuda:0", lvl); info = c.wait_ready(); print(lvl, "ready in", round(time.time() - t, 2), "s", info)
        c.discard()
    except Exception as e:
        print(lvl, "FAILED", repr(e)[:300], getattr(e, "detail", "")[-600:] if getattr(e, "detail", None) else "")
PY
fi
if has tests; then
  echo "=== gpu tests"; timeout 420 python3 -m pytest -q -rA -p no:cacheprovider -m gpu --timeout 300 \
    tests/faults/test_faults_gpu.py tests/verify/test_verify_gpu.py tests/benchmark/test_bench_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
fi
if has latency; then
  echo "=== latency"; timeout 300 python3 bench/verify_latency.py --task vector_add --shapes small --reps 20 --distinct 50 2>&1 | tail -20
fi
if has selftest; then
  echo "=== selftest"; timeout 300 python3 -m evokernel_mcp selftest --capture "$OUT/selftest_h200" --step-timeout-s 200 2>&1 | tee "$OUT/selftest.txt" | tail -30
fi
if has journey; then
  echo "=== journey"; timeout 400 python3 tools/journey.py --journal 2>&1 | tail -30
fi
if has ab; then
  echo "=== ab"; timeout 500 python3 bench/ab_same_code.py ${AB_ARGS:-} 2>&1 | tail -40
fi
if has kb; then
  echo "=== kernelbench"; timeout 500 python3 bench/kernelbench_sweep.py ${KB_ARGS:---only 19,23,36,51,63,89,97} 2>&1 | tail -30
fi
mkdir -p "$OUT/res"; cp bench/results/*"$(date +%Y-%m-%d)"* "$OUT/res/" 2>/dev/null
tar czf "$OUT/results.tgz" -C "$OUT" res && rm -rf "$OUT/res"
