"""The environments of the processes the server starts: what reaches them, and what never does.

- A sandboxed child (sandbox.base_env) gets ENV_ALLOW only, plus what the harness sets for it.
- The runner (pool.py; harness code only, but a child could name its /proc/<pid>/environ where pids are shared)
  gets RUNNER_ALLOW and RUNNER_PREFIXES of ours (runner_env).
- Neither ever gets a secret: the server's HTTP token and its file's name, a name that looks like a credential
  (TOKEN, SECRET, PASSWORD, API_KEY, ...), or a name the user lists with `serve --secret-env` (settings).
- Files no sandbox may read (sandbox.py binds /dev/null over them): the server's token file (settings), what the
  server registers (hide_file), and every path in _EVOKERNEL_SECRET_FILES (os.pathsep separated; the runner is
  given the server's list this way).
"""

from __future__ import annotations

import os
import re

ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "ROCM_PATH",
             "HIP_PATH", "HSA_OVERRIDE_GFX_VERSION", "TRITON_HIP_LLD_PATH", "TRITON_PTXAS_PATH",
             "OMP_NUM_THREADS", "OMP_WAIT_POLICY")  # a GPU host's thread settings (a CPU child's are the harness's)
# The runner's environment (pool.py starts it; it runs no agent code, but a child could name its
# /proc/<pid>/environ where pids are shared): these names and prefixes, never a secret (below).
RUNNER_ALLOW = ("HOME", "USER", "LOGNAME", "TMPDIR", "XDG_CACHE_HOME", "PYTHONPATH", "PYTHONHASHSEED",
                "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "CC", "CXX", "NVCC", "HIPCC", "CUOBJDUMP", "NCU",
                "ROCPROFV3", "CLANG19", "LLVM_CONFIG")
RUNNER_PREFIXES = ("EVOKERNEL_", "TRITON_", "CUDA_", "HIP_", "HSA_", "ROCR_", "ROCM_", "ROCPROF", "NVIDIA_",
                   "PYTORCH_", "TORCH_", "OMP_", "MKL_", "KMP_", "GPU_", "AMD_", "MIOPEN_", "NCCL_", "LC_",
                   "LANG", "TZ", "PATH", "MALLOC_")
# Never passed on, whatever the lists above say: the server's HTTP token and its file, names that look like a
# credential, and every name the user lists with `serve --secret-env`.
SECRET_ENV = ("EVOKERNEL_HTTP_TOKEN", "EVOKERNEL_HTTP_TOKEN_FILE")
SECRET_FILES_VAR = "_EVOKERNEL_SECRET_FILES"
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE|AUTH", re.IGNORECASE)
# Files no sandbox may read, besides the state dir: _EVOKERNEL_SECRET_FILES (os.pathsep separated; the runner
# gets the server's list this way), the token file, and what the server registers (hide_file).
_HIDDEN_FILES: list[str] = []


def is_secret_name(name: str) -> bool:
    from evokernel_mcp import settings

    return name in SECRET_ENV or name in settings.get().secret_env or bool(_SECRET_NAME.search(name))


def hide_file(path: str | os.PathLike) -> None:
    """A file (the server's --token-file) that no sandbox of this process or of its runners may see."""
    p = os.path.realpath(os.fspath(path))
    if p not in _HIDDEN_FILES:
        _HIDDEN_FILES.append(p)


def hidden_files() -> list[str]:
    from evokernel_mcp import settings

    given = [p for p in os.environ.get(SECRET_FILES_VAR, "").split(os.pathsep) if p]
    token = settings.get().http_token_file
    out: list[str] = []
    for p in [*given, *([token] if token else []), *_HIDDEN_FILES]:
        q = os.path.realpath(p)  # where the bytes are: a link to it shows nothing once that path is hidden
        if q not in out:
            out.append(q)
    return out


def runner_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's environment: the allow-list above from ours, no secret, and the files to hide named."""
    env = {k: v for k, v in os.environ.items()
           if (k in RUNNER_ALLOW or k in ENV_ALLOW or k.startswith(RUNNER_PREFIXES)) and not is_secret_name(k)}
    hidden = hidden_files()
    if hidden:
        env[SECRET_FILES_VAR] = os.pathsep.join(hidden)
    env.update(extra or {})
    return env


