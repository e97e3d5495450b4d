#!/usr/bin/env bash
# Run the runtime/verify/task tests on a GPU host (gpu-marked ones included) and the verify latency
# bench; record the run under bench/results/ (and $OUT when set).
#   usage (repo root, H100/H200 or MI300X host):  PYTHONPATH=. bash tools/gpu_suite.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export EVOKERNEL_HOME="${EVOKERNEL_HOME:-$(mktemp -d)}"
stamp=$(date +%Y-%m-%d)
dev=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).replace(' ', '_') if torch.cuda.is_available() else 'cpu')")
log="bench/results/verify_gpu_suite_${dev}_${stamp}.md"
mkdir -p bench/results
{
  echo "# runtime/verify/tasks suite on ${dev} ($(date -Iseconds))"
  echo
  echo "- versions: $(python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip, 'triton', triton.__version__)")"
  echo
  echo '```'
  python3 -m pytest -p no:cacheprovider -v -rA -s tests/runtime tests/verify tests/tasks 2>&1 | tail -80
  echo '```'
} > "$log"
rc=${PIPESTATUS[0]}
python3 bench/verify_latency.py --task vector_add --shapes small --reps 30
python3 bench/verify_latency.py --task conv3d_depthwise --shapes small medium --reps 10 --candidate tests/verify/candidates/conv3d_torch.py || true
if [ -n "${OUT:-}" ]; then cp "$log" bench/results/verify_latency_*"${stamp}"*.md "$OUT"/ 2>/dev/null; fi
tail -5 "$log"
exit $rc
