#!/usr/bin/env bash
# One call on a lent GPU host (no internet): install the carried wheels (.whl/*.whl) and bubblewrap
# (.whl/*.deb), then run the named steps, each under its own time limit, logging into $OUT (which comes back).
#   bash tools/gpu/device_steps.sh [steps...]
#   steps: iso tests latency selftest journey ab ncu kb   (env: TESTS, AB_ARGS, KB_ARGS, NCU_ARGS, T_<step>)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t_start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
for d in .whl/*.deb; do dpkg -x "$d" /tmp/bw; done
export EVOKERNEL_BWRAP=/tmp/bw/usr/bin/bwrap PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 EVOKERNEL_HOME=/tmp/evohome
steps=${*:-iso tests latency}
lim() { local v="T_$1"; echo "${!v:-$2}"; }
step() {  # step NAME DEFAULT_LIMIT CMD...
  local name=$1 t; t=$(lim "$1" "$2"); shift 2
  echo "=== $name (limit ${t}s, at +$(( $(date +%s) - t_start ))s)"
  timeout -k 10 "$t" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?"; tail -${TAIL:-25} "$OUT/$name.log"
}
has() { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
if has iso; then
  echo "=== isolation"; $EVOKERNEL_BWRAP --version; nvidia-smi -L
  python3 -c "
import time
from evokernel_mcp.runtime.spares import Child
for lvl in ('bwrap+uid',):
    t = time.time(); c = Child('cuda:0', lvl); print(lvl, 'ready in', round(time.time() - t, 2), 's', c.wait_ready()); c.discard()
" 2>&1 | tail -3
fi
has tests && step tests 300 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu --timeout 240 ${TESTS:-tests/faults/test_faults_gpu.py tests/verify/test_verify_gpu.py tests/benchmark/test_bench_gpu.py}
has latency_torch && step latency_torch 120 python3 bench/verify_latency.py --torch --tag torch --reps 20 --distinct ${DISTINCT:-50}
has latency && step latency 150 python3 bench/verify_latency.py --task vector_add --shapes small --reps 20 --distinct ${DISTINCT:-50}
has selftest && step selftest 200 python3 -m evokernel_mcp selftest --capture /tmp/selftest_h200 --step-timeout-s 120
[ -d /tmp/selftest_h200 ] && tar czf /tmp/selftest_bundle.tgz -C /tmp selftest_h200  # into results.tgz below:
# a call returns only so many files
has journey && step journey 400 python3 tools/journey.py --journal
has ab && step ab 450 python3 bench/ab_same_code.py ${AB_ARGS:-}
has ncu && step ncu 300 python3 bench/ncu_kinds.py ${NCU_ARGS:-}
[ -n "${KB_END:-}" ] && export T_kb=$(( KB_END - ($(date +%s) - t_start) )) && KB_MORE="${KB_MORE:-} --budget-s $(( T_kb - 60 ))"
has kb && step kb 560 python3 bench/kernelbench_sweep.py ${KB_ARGS:---only 19,23} --kb .kb/level1 ${KB_MORE:-}
mkdir -p "$OUT/res"; cp bench/results/*"$(date +%Y-%m-%d)"* "$OUT/res/" 2>/dev/null
[ -f /tmp/selftest_bundle.tgz ] && cp /tmp/selftest_bundle.tgz "$OUT/res/"
[ -d /tmp/evohome ] && tar czf "$OUT/evohome_journal.tgz" -C /tmp/evohome . --exclude='*.so' --exclude='artifacts' 2>/dev/null
tar czf "$OUT/results.tgz" -C "$OUT" res && rm -rf "$OUT/res"
echo "=== done at +$(( $(date +%s) - t_start ))s"
