#!/usr/bin/env bash
# One device call on a lent GPU host (no internet): install the carried wheels (.whl/*.whl) and bubblewrap
# (.whl/*.deb), then run the named acceptance steps, each under its own limit, logs and results into $OUT.
#   bash tools/gpu/acceptance.sh STEP...
#   steps: parity (profile_pmc presets + thread_trace vs a recorded run: PARITY_BEFORE=file), gputests (the
#   gpu-marked tests in GPU_TESTS), defaults (verify at default arguments: every shape set on a GPU), sweep
#   (12 configurations of a Triton GEMM in one call), integrity (the exploit corpus on this GPU), cmd (the shell
#   command in $CMD, limit T_cmd), campaign (the benchmark verdict at default arguments through the MCP client: same code, 5 %/2 % more work, downgrades,
#   forges, the wall of a default call; bench/ab_campaign.py, KernelBench from .kb/level1, at most 8 minutes)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
if [ ! -f /tmp/site/.evk_installed ]; then  # a machine kept warm between calls has them already
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 && touch /tmp/site/.evk_installed || tail -5 "$OUT/pip.log"
  for d in .whl/*.deb; do dpkg -x "$d" /tmp/bw; done
fi
export EVOKERNEL_BWRAP=/tmp/bw/usr/bin/bwrap PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 EVOKERNEL_HOME=/tmp/evohome
step() {  # step NAME LIMIT CMD...
  local name=$1 t=$2; shift 2
  echo "=== $name (limit ${t}s, at +$(( $(date +%s) - t0 ))s)"
  timeout -k 10 "$t" "$@" > "$OUT/$name.log" 2>&1; echo "rc=$?"; tail -${TAIL:-15} "$OUT/$name.log"
}
for s in "$@"; do case $s in
  parity) step parity "${T_parity:-240}" python3 bench/profile_parity.py --kernelbench .kb/level1 --out "$OUT/parity_after.json"
          [ -n "${PARITY_BEFORE:-}" ] && python3 bench/profile_parity.py --compare "$PARITY_BEFORE" "$OUT/parity_after.json" \
            | tee "$OUT/parity_compare.txt" | tail -30 ;;
  gputests) step gputests "${T_gputests:-300}" python3 -m pytest -q -rfEs -p no:cacheprovider -m gpu --timeout 240 \
            ${GPU_TESTS:-tests/compile/test_compile_specialization_gpu.py tests/profile/test_profile_tensor_gpu.py tests/faults/test_faults_gpu.py} ;;
  defaults) echo 'def run(x, y):
    return x + y' > /tmp/cand.py
            step defaults 120 python3 -m evokernel_mcp call verify_vs_pytorch --json '{"candidate": "@/tmp/cand.py", "task": "vector_add"}' ;;
  sweep) step sweep "${T_sweep:-240}" python3 bench/sweep_gemm.py --out "$OUT/sweep_gemm.md" ;;
  cmd) step cmd "${T_cmd:-300}" sh -c "$CMD" ;;
  campaign) step campaign "${T_campaign:-560}" python3 bench/ab_same_code.py --campaign --kb .kb/level1 \
            --budget-s "${CAMPAIGN_BUDGET_S:-480}" ;;
  integrity) step integrity "${T_integrity:-420}" sh -c "python3 -m evokernel_mcp integrity --json > $OUT/integrity.json" ;;
esac; done
echo "=== done at +$(( $(date +%s) - t0 ))s"
