#!/usr/bin/env bash
# Installs what evokernel-mcp needs on a fresh Debian/Ubuntu machine (run by `make install`).
# 1. System compilers for the offline HIP path (clang-19, lld-19, ROCm device libs) and bubblewrap (the
#    sandbox agent code runs in), when root.
# 2. A virtual environment with the CPU build of torch first (a plain `torch` pulls a CUDA build
#    of several GB), then this package with its test extras.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
log() { echo "[setup] $*" >&2; }

need_apt=()
command -v clang-19 >/dev/null 2>&1 || need_apt+=(clang-19)
command -v ld.lld-19 >/dev/null 2>&1 || need_apt+=(lld-19)
command -v llvm-readelf-19 >/dev/null 2>&1 || need_apt+=(llvm-19)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)  # the sandbox for agent code (runtime/sandbox.py)
ls /usr/lib/llvm-*/lib/clang/*/lib/amdgcn/bitcode/ockl.bc /usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc \
   /usr/lib/*/amdgcn/bitcode/ockl.bc >/dev/null 2>&1 || need_apt+=(rocm-device-libs)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing system packages: ${need_apt[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
  else
    log "WARNING: missing ${need_apt[*]} and not root: the offline HIP compile path will be disabled"
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip >/dev/null
if ! "$VPY" -c 'import torch' >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 || [ -e /dev/kfd ]; then
    log "GPU host: installing torch from the default index"
    "$VPY" -m pip install -q torch
  else
    log "no GPU: installing the CPU build of torch (torch==2.13.0)"
    "$VPY" -m pip install -q torch==2.13.0
  fi
fi
log "installing evokernel-mcp with test extras"
"$VPY" -m pip install -q -e '.[test]'
log "done"
