#!/usr/bin/env bash
# Installs what evokernel-mcp needs on a fresh Debian/Ubuntu machine (run by `make install`).
# 1. System compilers for the offline HIP path (clang-19, lld-19, ROCm device libs) and bubblewrap (the
#    sandbox agent code runs in), when root.
# 2. A virtual environment with torch first, then this package with its test extras. On a host without a
#    GPU, torch comes from PyTorch's CPU wheel index when that answers within a few seconds (a plain
#    `pip install torch` pulls the CUDA build, ~0.5 GB plus several GB of NVIDIA libraries); otherwise from
#    pip's configured indexes (a local wheel folder, a mirror). Either way it says which build it installed.
# `tools/setup.sh --torch-only` does only the torch step (into an existing $VENV).
# Settings: PYTHON, VENV, TORCH_SPEC (default torch==2.13.0 without a GPU, torch with one),
# TORCH_CPU_INDEX (default https://download.pytorch.org/whl/cpu).
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
log() { echo "[setup] $*" >&2; }

# True when $1/torch/ answers within 5 s (a host that cannot reach it, e.g. behind a firewall, falls back).
index_reachable() {
  "$PYTHON" - "$1" >/dev/null 2>&1 <<'PROBE'
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5).read(1)
PROBE
}

torch_build() {
  "$1" -W ignore -c 'import torch; v = torch.version; hip = getattr(v, "hip", None)
print(torch.__version__, "(" + (f"CUDA {v.cuda}" if v.cuda else f"ROCm/HIP {hip}" if hip else "CPU only: no CUDA, no HIP") + ")")' 2>/dev/null
}

install_torch() {
  local vpy=$1 gpu=""
  if "$vpy" -c 'import torch' >/dev/null 2>&1; then
    log "torch already installed: $(torch_build "$vpy")"
    return
  fi
  command -v nvidia-smi >/dev/null 2>&1 && gpu=nvidia
  [ -e /dev/kfd ] && gpu=amd
  if [ -n "$gpu" ]; then
    log "GPU host ($gpu): installing ${TORCH_SPEC:-torch} from pip's configured indexes"
    "$vpy" -m pip install -q --no-compile "${TORCH_SPEC:-torch}"
  else
    local spec=${TORCH_SPEC:-torch==2.13.0}
    if index_reachable "$TORCH_CPU_INDEX"; then
      log "no GPU: installing the CPU build of $spec from $TORCH_CPU_INDEX"
      "$vpy" -m pip install -q --no-compile "$spec" --index-url "$TORCH_CPU_INDEX" \
        || { log "that failed; installing $spec from pip's configured indexes instead"
             "$vpy" -m pip install -q --no-compile "$spec"; }
    else
      log "no GPU, but $TORCH_CPU_INDEX is not reachable from here (5 s probe): installing $spec from pip's" \
          "configured indexes (on plain PyPI that is the CUDA build; set TORCH_CPU_INDEX to a reachable CPU index to avoid it)"
      "$vpy" -m pip install -q --no-compile "$spec"
    fi
  fi
  log "installed torch $(torch_build "$vpy")"
  if [ "$gpu" = amd ] && ! "$vpy" -c 'import torch, sys; sys.exit(not torch.version.hip)' 2>/dev/null; then
    log "WARNING: this is a ROCm host but this torch has no HIP: install a ROCm build" \
        "(https://download.pytorch.org/whl/rocm<version>) for verify/benchmark on the GPU"
  fi
}

# The installed packages' bytecode, written on every core at once (pip compiles one file at a time: 20 of the 29 s
# a CPU torch took on the 2-core VM). Sandboxed children never write bytecode (runtime/pycache.py), and our own
# package, installed editable, gets none from pip at all (compiled at the end).
compile_packages() {
  local site
  site=$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$1" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true  # (a stray file that does not compile stays as pip leaves it)
}

if [ "${1:-}" = --torch-only ]; then
  install_torch "$VENV/bin/python"
  compile_packages "$VENV/bin/python"
  exit 0
fi

need_apt=()
command -v clang-19 >/dev/null 2>&1 || need_apt+=(clang-19)
command -v ld.lld-19 >/dev/null 2>&1 || need_apt+=(lld-19)
command -v llvm-readelf-19 >/dev/null 2>&1 || need_apt+=(llvm-19)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)  # the sandbox for agent code (runtime/sandbox.py)
have_device_libs() {  # any one of the places the ROCm device libraries' bitcode lies
  local p
  for p in /usr/lib/llvm-*/lib/clang/*/lib/amdgcn/bitcode/ockl.bc /usr/lib/*/amdgcn/bitcode/ockl.bc; do
    [ -e "$p" ] && return 0
  done
  return 1
}
have_device_libs || need_apt+=(rocm-device-libs)
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
install_torch "$VPY"
log "installing evokernel-mcp with test extras"
"$VPY" -m pip install -q --no-compile -e '.[test]'
compile_packages "$VPY"
"$VPY" -m compileall -q evokernel_mcp >/dev/null
log "done"
