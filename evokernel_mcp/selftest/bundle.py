"""Read a capture bundle back with OUR parsers: every file the manifest names with a parser must parse.
`evokernel-mcp selftest --check-bundle DIR` runs this on a bundle a user sent back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evokernel_mcp.models import Model
from evokernel_mcp.selftest.models import Manifest


def _parsers() -> dict[str, Callable[[str, str], Any]]:
    from evokernel_mcp.compile.amd_meta import parse_amdgpu_metadata
    from evokernel_mcp.devices.amdsmi import parse_amdsmi_json, parse_amdsmi_text
    from evokernel_mcp.devices.cuda import parse_nvidia_smi_xml
    from evokernel_mcp.devices.rocm import parse_rocminfo
    from evokernel_mcp.integrity.models import Report as IntegrityReport
    from evokernel_mcp.profile import ncu_parsers as nc
    from evokernel_mcp.profile import rocprof_parsers as rp

    return {
        "rocminfo": lambda t, w: parse_rocminfo(t),
        "amdsmi_json": lambda t, w: parse_amdsmi_json(t),
        "amdsmi_text": lambda t, w: parse_amdsmi_text(t),
        "json": lambda t, w: json.loads(t),
        "integrity_report": lambda t, w: IntegrityReport.model_validate_json(t),
        "rocprofv3_list_avail": rp.parse_rocprofv3_list_avail,
        "rocprofv3_counter_collection": rp.parse_rocprofv3_counter_collection,
        "rocprofv3_kernel_trace": rp.parse_rocprofv3_kernel_trace,
        "rocprofv3_agent_info": rp.parse_rocprofv3_agent_info,
        "rocprofv3_stats": rp.parse_rocprofv3_stats,
        "att_code_json": rp.parse_att_code_json,
        "att_stats_csv": rp.parse_att_stats_csv,
        "att_filenames": rp.parse_att_filenames,
        "att_wave": rp.parse_att_wave,
        "att_occupancy": rp.parse_att_occupancy,
        "amdgpu_metadata": lambda t, w: parse_amdgpu_metadata(t),
        "nvidia_smi_xml": lambda t, w: parse_nvidia_smi_xml(t),
        "ncu_raw_csv": nc.parse_ncu_raw_csv,
        "ncu_source_csv": nc.parse_ncu_source_csv,
    }


class FileCheck(Model):
    path: str
    parser: str
    ok: bool
    detail: str


def _size(obj: Any) -> str:
    if isinstance(obj, list):
        return f"{len(obj)} records"
    for attr in ("gpus", "agents", "counters"):
        if hasattr(obj, attr):
            return f"{len(getattr(obj, attr))} {attr}"
    return type(obj).__name__


def check_bundle(root: Path) -> tuple[Manifest, list[FileCheck]]:
    man = Manifest.model_validate_json((root / "manifest.json").read_text())
    parsers = _parsers()
    out = []
    for f in man.files:
        if not f.parser:
            continue
        p = root / f.path
        try:
            obj = parsers[f.parser](p.read_text(errors="replace"), p.name)
            out.append(FileCheck(path=f.path, parser=f.parser, ok=True, detail=_size(obj)))
        except Exception as e:  # noqa: BLE001 - every file gets a verdict
            out.append(FileCheck(path=f.path, parser=f.parser, ok=False, detail=f"{type(e).__name__}: {e}"[:500]))
    return man, out
