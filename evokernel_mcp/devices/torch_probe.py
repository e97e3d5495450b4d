"""Standalone script: print torch.cuda device properties as one JSON object on stdout.

Run as a subprocess (`python torch_probe.py`) so the server process never creates a CUDA/HIP context.
Uses only torch and the standard library; attributes a given torch build lacks are reported as null.
"""

import json
import sys

ATTRS = {
    "name": "name", "major": "major", "minor": "minor", "uuid": "uuid", "gcn_arch_name": "gcnArchName",
    "total_memory": "total_memory", "multi_processor_count": "multi_processor_count",
    "l2_cache_size": "L2_cache_size", "warp_size": "warp_size",
    "max_threads_per_multi_processor": "max_threads_per_multi_processor",
    "max_threads_per_block": "max_threads_per_block",
    "shared_memory_per_block": "shared_memory_per_block",
    "shared_memory_per_block_optin": "shared_memory_per_block_optin",
    "shared_memory_per_multiprocessor": "shared_memory_per_multiprocessor",
    "regs_per_multiprocessor": "regs_per_multiprocessor", "clock_rate_khz": "clock_rate",
    "memory_clock_rate_khz": "memory_clock_rate", "memory_bus_width": "memory_bus_width",
}


def _value(props, attr):
    v = getattr(props, attr, None)
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    return str(v)


def main() -> int:
    out = {"torch_version": None, "cuda_version": None, "hip_version": None, "devices": [], "error": None}
    try:
        import torch

        out.update(torch_version=torch.__version__, cuda_version=torch.version.cuda,
                   hip_version=getattr(torch.version, "hip", None))
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                dev = {"index": i}
                dev.update({a: _value(props, a) for a in ATTRS.values()})  # torch's own attribute names
                out["devices"].append(dev)
        else:
            out["error"] = "torch.cuda.is_available() is False"
    except Exception as e:  # noqa: BLE001 - reported to the caller as data
        out["error"] = f"{type(e).__name__}: {e}"
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
