"""Content-addressed cache of compile results.

Key = sha256 over (schema, source, language, kernel, target, signature, constexprs, options' stable
dict, toolchain identity). Entries are the CompileResult JSON under
<state>/compile_cache/<key[:2]>/<key>.json; the assembly lives in the artifact store under an id
derived from the same key, so a hit is one small file read (no compiler is started or probed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

from pydantic import ValidationError

from evokernel_mcp.compile.models import CompileResult
from evokernel_mcp.paths import sub_state_dir

log = logging.getLogger(__name__)

SCHEMA = 1


def cache_key(*, source: str, language: str, kernel: str, target: str, signature: dict | None,
              constexprs: dict | None, options: dict[str, Any], toolchain: str) -> str:
    payload = {"schema": SCHEMA, "source": source, "language": language, "kernel": kernel, "target": target,
               "signature": signature or {}, "constexprs": constexprs or {}, "options": options,
               "toolchain": toolchain}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def artifact_id_for(key: str) -> str:
    """The artifact id (16 hex) of a cache entry: content-derived, so a hit finds its assembly."""
    return key[:16]


def _path(key: str):
    d = sub_state_dir("compile_cache") / key[:2]
    return d / f"{key}.json"


def get(key: str) -> CompileResult | None:
    """The cached result (cached=True), or None if absent, unreadable or its artifact is gone."""
    p = _path(key)
    try:
        data = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        res = CompileResult.model_validate_json(data)
    except ValidationError:
        log.warning("dropping unreadable compile cache entry %s", p)
        p.unlink(missing_ok=True)
        return None
    if res.artifact_id and not (sub_state_dir("artifacts") / res.artifact_id / "meta.json").is_file():
        return None
    return res.model_copy(update={"cached": True})


def put(key: str, result: CompileResult) -> None:
    """Store atomically (write + rename), so a concurrent reader never sees half a file."""
    p = _path(key)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(result.model_copy(update={"cached": False}).model_dump_json(), encoding="utf-8")
    os.replace(tmp, p)
