"""Builds and launches the single-source CUDA/HIP C++ steps from Python, with no torch extension build.

NVIDIA: nvcc -cubin -arch=sm_<cc of device 0>; AMD: hipcc --genco --offload-arch=<gcnArchName>. The
module is loaded through the driver API (libcuda / libamdhip64 via ctypes) into the context torch
already made current, and launched on torch's current stream. Binaries are cached by source hash in
$TMPDIR. A candidate for the server is this file's text + CUDA_SRC + the step's kernel.py
(`candidate_source(step_dir)`), so it is one self-contained source.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import torch

_MODULES = {}


def _tool(names, env, dirs):
    for n in names:
        for d in ([os.environ[env] + "/bin"] if os.environ.get(env) else []) + dirs:
            if os.access(os.path.join(d, n), os.X_OK):
                return os.path.join(d, n)
        if shutil.which(n):
            return shutil.which(n)
    raise RuntimeError(f"{names[0]} not found (set ${env} or put it on PATH)")


def _binary(src):
    hip = torch.version.hip is not None
    if hip:
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
        argv = [_tool(["hipcc"], "ROCM_PATH", ["/opt/rocm/bin"]), "--genco", f"--offload-arch={arch}", "-O3"]
    else:
        major, minor = torch.cuda.get_device_capability(0)
        # -lineinfo: the profilers map instructions to kernel.cu's lines (thread_trace's source view); same SASS
        argv = [_tool(["nvcc"], "CUDA_HOME", ["/usr/local/cuda/bin"]), "-cubin", f"-arch=sm_{major}{minor}",
                "-O3", "-std=c++17", "-lineinfo"]
    key = hashlib.sha256((" ".join(argv[1:]) + src).encode()).hexdigest()[:16]
    out = os.path.join(tempfile.gettempdir(), f"conv3d_steps_{key}.bin")
    if not os.path.exists(out):
        cu = out[:-4] + (".hip" if hip else ".cu")
        with open(cu, "w") as f:
            f.write(src)
        res = subprocess.run(argv + ["-o", out + ".tmp", cu], capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed:\n{res.stderr[-3000:]}")
        os.replace(out + ".tmp", out)
    with open(out, "rb") as f:
        return f.read(), hip


class _Kernel:
    def __init__(self, src, name):
        torch.empty(1, device="cuda")  # the runtime makes the primary context current
        data, self.hip = _binary(src)
        self.lib = ctypes.CDLL("libamdhip64.so" if self.hip else "libcuda.so.1")
        p = "hip" if self.hip else "cu"
        self._launch = getattr(self.lib, p + ("ModuleLaunchKernel" if self.hip else "LaunchKernel"))
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._data = ctypes.create_string_buffer(data, len(data))
        self._check(getattr(self.lib, p + "ModuleLoadData")(ctypes.byref(self.mod), self._data), "module load")
        self._check(getattr(self.lib, p + "ModuleGetFunction")(ctypes.byref(self.fn), self.mod, name.encode()),
                    f"get function {name}")

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed with driver error {rc}")

    def __call__(self, grid, block, smem, *args):
        # a tensor: its device pointer; bytes: a by-value struct (e.g. a CUtensorMap); else an int
        vals = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor)
                else ctypes.create_string_buffer(a, len(a)) if isinstance(a, bytes) else ctypes.c_int(a) for a in args]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self._check(self._launch(self.fn, *[ctypes.c_uint(g) for g in grid], *[ctypes.c_uint(b) for b in block],
                                 ctypes.c_uint(smem), stream, params, None), "launch")


def build_kernel(src, name):
    """The kernel `name` of C++ source `src`, built once per process for device 0."""
    if (src, name) not in _MODULES:
        _MODULES[(src, name)] = _Kernel(src, name)
    return _MODULES[(src, name)]


def candidate_source(step_dir):
    """One self-contained candidate source for the server: this launcher + the step's C++ + its run()."""
    from pathlib import Path
    step_dir = Path(step_dir)
    launcher = Path(__file__).read_text()
    cu = (step_dir / "kernel.cu").read_text()
    assert "'''" not in cu
    return launcher + f"\n\nCUDA_SRC = r'''{cu}'''\n\n" + (step_dir / "kernel.py").read_text()
