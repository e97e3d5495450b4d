#!/usr/bin/env bash
# On the lent 2x H200 machine, repo root; carry [".whl", ".gpu/ray"]. Where a batch's per-GPU slowdown on 2 GPUs
# comes from: the same 8-candidate batch on GPU 0 (bench/batch_scaling.py local:1), alone; beside a second,
# independent server doing the same on GPU 1; beside CPU burners; beside CUDA context churn on GPU 1.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
for d in .whl/*.deb; do dpkg -x "$d" /tmp/bw; done
export EVOKERNEL_BWRAP=/tmp/bw/usr/bin/bwrap PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
N=${N:-8}; MT=${MT:-0.2}
one() {  # one 8-candidate batch on one GPU: $1 tag, $2 GPU
  CUDA_VISIBLE_DEVICES=$2 EVOKERNEL_HOME=/tmp/evoh_$1 timeout -k 5 150 python3 bench/batch_scaling.py --modes local:1 \
    --n "$N" --max-time-s "$MT" --tag "$1" > "$OUT/$1.log" 2>&1
  grep '^\[batch_scaling\] local:1:' "$OUT/$1.log" | sed "s/^/$1 gpu$2: /"
}
for what in ${STEPS:-alone pair cpu ctx}; do
  case $what in
    alone) one c_alone 0 ;;
    pair) one c_pair0 0 & one c_pair1 1 & wait ;;
    cpu) for i in $(seq ${BURN:-12}); do timeout 60 python3 -c "while 1: pass" & done; sleep 1; one c_cpu 0; pkill -f "while 1: pass" ;;
    ctx) (end=$((SECONDS + 60)); while [ $SECONDS -lt $end ]; do for j in 1 2 3; do CUDA_VISIBLE_DEVICES=1 timeout 30 python3 -c "import torch; torch.zeros(1, device='cuda'); import torch.profiler as p; from torch.autograd.profiler import profile
with profile(use_cpu=False, use_device='cuda', use_kineto=True): torch.ones(4, device='cuda').sum().item()" & done; wait; done) & churn=$!
       sleep 1; one c_ctx 0; kill $churn 2>/dev/null; pkill -f "import torch; torch.zeros" ;;
  esac
done
tar czf "$OUT/results.tgz" bench/results/*"$(date +%F)"* "$OUT"/*.log 2>/dev/null; ls "$OUT"
