#!/usr/bin/env bash
# On the lent 2x H200 machine (no internet), repo root; carry [".whl", ".gpu/ray", ".kb"] (.gpu/ray: the Ray
# cp312 wheel and its dependencies):
#   MODES=local:1,local:2,ray:1,ray:2 bash tools/gpu/x2_batch.sh
set -uo pipefail
t0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl $(ls .gpu/ray/*.whl 2>/dev/null) > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
for d in .whl/*.deb; do dpkg -x "$d" /tmp/bw; done
export EVOKERNEL_BWRAP=/tmp/bw/usr/bin/bwrap PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 EVOKERNEL_HOME=/tmp/evohome RAY_AUTH_MODE=disabled
nvidia-smi -L; python3 -c "import ray; print('ray', ray.__version__)" 2>&1 | tail -1
if [ -n "${SELFTEST:-}" ]; then  # the ROCm-readiness selftest, its capture bundle returned as one file
  timeout -k 10 110 python3 -m evokernel_mcp selftest --capture /tmp/selftest_h200 --step-timeout-s 100 > "$OUT/selftest.log" 2>&1
  echo "selftest rc=$?"; tail -4 "$OUT/selftest.log"; tar czf "$OUT/selftest_bundle.tgz" -C /tmp selftest_h200
fi
if [ -n "${TOPO:-}" ]; then lscpu | grep -E '^(CPU\(s\)|Thread|Core|Socket|Model name|NUMA)'; cat /sys/devices/system/cpu/cpu{0,1,16}/topology/thread_siblings_list 2>/dev/null | tr '\n' ' '; echo; fi
if [ -n "${HT:-}" ]; then python3 bench/ht_probe.py | tee "$OUT/ht.txt"; fi
if [ -n "${HTLOAD:-}" ]; then python3 bench/ht_probe.py --partners "" --load "$HTLOAD" | tee /tmp/ht_load.txt; fi
if [ -n "${IMPORTS:-}" ]; then  # what a child's start pays for imports (bytecode present or not, import time)
  { python3 -c "import torch, os; d = os.path.dirname(torch.__file__); c = os.path.join(d, '__pycache__'); print(torch.__file__, 'pycache', os.path.isdir(c), len(os.listdir(c)) if os.path.isdir(c) else 0)"
    for i in 1 2 3; do /usr/bin/time -f "import torch: %e s wall, %U user, %S sys" env PYTHONDONTWRITEBYTECODE=1 python3 -c "import torch"; done
    PYTHONDONTWRITEBYTECODE=1 python3 -X importtime -c "import torch, triton" 2> /tmp/imp.txt; sort -t'|' -k2 -n /tmp/imp.txt | tail -12; } 2>&1 | tee "$OUT/imports.txt"
fi
if [ -n "${PROBE:-}" ]; then  # bench/driver_probe.py: request round trips alone and beside other load
  timeout -k 5 "${TP:-150}" python3 bench/driver_probe.py $PROBE 2>&1 | tee "$OUT/driver_probe.txt" | grep '^\[driver_probe\]'
fi
if [ -n "${CONFIGS:-}" ]; then  # several runs of batch_scaling, each "TAG|VAR=value ...|MODES[|MAX_TIME_S[|TASK[|SHAPES]]]", ';' between
  IFS=';' read -ra runs <<< "$CONFIGS"
  for r in "${runs[@]}"; do
    IFS='|' read -r tag envs modes mt task shapes <<< "$r"
    echo "== $tag ($envs) $modes ${mt:-${MT:-0.2}} ${task:-${TASK:-vector_add}}"
    env $envs timeout -k 10 "${T:-300}" python3 bench/batch_scaling.py --modes "$modes" --max-time-s "${mt:-${MT:-0.2}}" --shapes "${shapes:-${SHAPES:-small,medium}}" --task "${task:-${TASK:-vector_add}}" --tag "$tag" > "$OUT/bs_$tag.log" 2>&1
    echo "rc=$?"; grep '^\[batch_scaling\]' "$OUT/bs_$tag.log"
  done
else
  log="$OUT/batch_scaling.log"
  timeout -k 10 "${T:-400}" python3 bench/batch_scaling.py --modes "${MODES:-local:1,local:2,ray:1,ray:2}" --max-time-s "${MT:-0.2}" --shapes "${SHAPES:-small,medium}" --tag "${TAG:-s7}" > "$log" 2>&1
  echo "rc=$?"; grep '^\[batch_scaling\]' "$log"
fi
if [ -n "${TESTS:-}" ]; then  # GPU-marked tests (pytest -k/-path args in TESTS)
  EVOKERNEL_HOME=/tmp/evohome_t timeout -k 10 "${TT:-120}" python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS > "$OUT/gpu_tests.log" 2>&1
  echo "tests rc=$?"; tail -4 "$OUT/gpu_tests.log"
fi
if [ -n "${KB:-}" ]; then  # the rest of the call: the KernelBench sweep, one half per GPU
  TKB=$(( ${END:-575} - ($(date +%s) - t0) )); echo "kb sweep: ${TKB}s left"
  for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g EVOKERNEL_HOME=/tmp/evohome_kb$g timeout -k 10 "${TKB:-200}" python3 bench/kernelbench_sweep.py \
      --part $((g + 1))/2 --budget-s $(( ${TKB:-200} - 40 )) --tag x2gpu$g $KB > "$OUT/kb_gpu$g.log" 2>&1 &
  done
  wait; tail -3 "$OUT"/kb_gpu*.log; cp bench/results/kernelbench_sweep_* "$OUT"/ 2>/dev/null
fi
if [ -n "${AB0:-}" ]; then  # the rest of the call: bench/ab_same_code.py, one share per GPU
  TAB=$(( ${END:-575} - ($(date +%s) - t0) )); echo "ab: ${TAB}s left"
  CUDA_VISIBLE_DEVICES=0 EVOKERNEL_HOME=/tmp/evohome_ab0 timeout -k 10 $TAB python3 bench/ab_same_code.py $AB0 --tag ${TAG:-s7}gpu0 > "$OUT/ab_gpu0.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 EVOKERNEL_HOME=/tmp/evohome_ab1 timeout -k 10 $TAB python3 bench/ab_same_code.py $AB1 --tag ${TAG:-s7}gpu1 > "$OUT/ab_gpu1.log" 2>&1 &
  wait; grep -h "^[a-z_0-9]* [0-9.]* \[" "$OUT"/ab_gpu*.log | tail -60
fi
if [ -n "${NCU:-}" ]; then  # the rest of the call: ncu_kinds on GPU 0, ab_same_code (5 % check, cheats) on GPU 1
  TN=$(( ${END:-575} - ($(date +%s) - t0) )); echo "ncu: ${TN}s left"
  CUDA_VISIBLE_DEVICES=0 EVOKERNEL_HOME=/tmp/evohome_ncu timeout -k 10 $TN python3 bench/ncu_kinds.py --kinds "$NCU" --budget-s $(( TN - 20 )) --tag ${TAG:-s7} > "$OUT/ncu.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 EVOKERNEL_HOME=/tmp/evohome_fc timeout -k 10 $TN python3 bench/ab_same_code.py ${FC:---only five,cheats --max-time-s 0.5} --tag ${TAG:-s7}fc > "$OUT/fc.log" 2>&1 &
  wait; tail -12 "$OUT/ncu.log"; tail -5 "$OUT/fc.log"
fi
tar czf "$OUT/results.tgz" $(ls bench/results/*"$(date +%F)"* 2>/dev/null) "$OUT"/*.log 2>/dev/null
ls "$OUT"
