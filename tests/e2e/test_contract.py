"""docs/api.md is what clients script against: every tool, argument and result field named there must be
in the tools' JSON schemas (more is allowed, never fewer or renamed)."""

from __future__ import annotations

import anyio
from mcp import Client

from evokernel_mcp.server import build_server

# tool -> (arguments, result fields; "a.b" = field b of the object/array items under a)
CONTRACT: dict[str, tuple[set[str], set[str]]] = {
    "query_rocminfo": ({"refresh"}, {
        "backend", "devices", "offline_targets", "provenance", "devices.index", "devices.name", "devices.arch",
        "devices.compute_units", "devices.wavefront_size", "devices.max_waves_per_cu",
        "devices.lds_bytes_per_workgroup", "devices.l2_bytes", "devices.max_clock_mhz", "devices.memory_bytes",
        "devices.peak_bandwidth_gbs", "devices.peak_tflops", "devices.conflicts"}),
    "compile_kernel": ({"source", "language", "kernel", "target", "signature", "constexprs", "options"}, {
        "ok", "diagnostics", "toolchain", "target", "artifact_id", "cached", "kernels", "provenance",
        "diagnostics.line", "diagnostics.column", "diagnostics.severity", "diagnostics.message",
        "toolchain.name", "toolchain.version",
        "kernels.name", "kernels.vgpr_count", "kernels.agpr_count", "kernels.sgpr_count", "kernels.lds_bytes",
        "kernels.scratch_bytes", "kernels.vgpr_spill_count", "kernels.sgpr_spill_count", "kernels.wavefront_size",
        "kernels.max_workgroup_size", "kernels.registers", "kernels.occupancy", "kernels.isa_summary",
        "kernels.occupancy.waves_per_simd", "kernels.occupancy.warps_per_sm", "kernels.occupancy.limiter",
        "kernels.occupancy.limits"}),
    "verify_vs_pytorch": ({"task", "reference", "candidate", "shapes", "seeds", "tolerance", "timeout_s", "wait_s"}, {
        "passed", "cases", "device", "error", "stdout", "stderr", "job_id", "provenance",
        "cases.shape", "cases.seed", "cases.passed", "cases.max_abs_err", "cases.max_rel_err", "cases.rel_l2_err",
        "cases.calc_diff", "cases.mismatches", "cases.first_mismatch_index", "cases.nan_count",
        "cases.unwritten_count", "cases.deterministic", "cases.inputs_mutated"}),
    "benchmark": ({"task", "reference", "candidate", "baseline", "shapes", "cold_cache", "min_reps", "max_time_s",
                   "target_rel_ci", "use_graph", "flops", "bytes", "timeout_s", "wait_s"}, {
        "results", "device", "clocks", "versions", "job_id", "provenance",
        "results.shape", "results.candidate", "results.baseline", "results.speedup", "results.speedup_ci",
        "results.achieved_gbs", "results.achieved_tflops", "results.roofline_ms", "results.fraction_of_roofline",
        "results.fraction_of_peak", "results.roofline.fraction_of_peak", "results.roofline.peak_note",
        "results.roofline.counts_source",
        "results.noise", "results.flags", "results.candidate.median_ms", "results.candidate.min_ms",
        "results.candidate.mean_ms", "results.candidate.p10_ms", "results.candidate.p90_ms",
        "results.candidate.std_ms", "results.candidate.ci_median_ms", "results.candidate.reps"}),
    "profile_pmc": ({"task", "reference", "candidate", "preset", "counters", "kernel_filter", "wait_s"}, {
        "tool", "dispatches", "findings", "artifact_id", "job_id", "provenance", "dispatches.kernel",
        "dispatches.duration_ns", "dispatches.counters", "dispatches.derived", "findings.text", "findings.evidence"}),
    "thread_trace": ({"task", "reference", "candidate", "kernel_filter", "wait_s", "top_n"}, {
        "tool", "kernel", "class_breakdown", "hot_instructions", "stall_reasons", "artifact_id", "job_id",
        "provenance", "hot_instructions.index", "hot_instructions.instruction", "hot_instructions.class",
        "hot_instructions.cycles", "hot_instructions.stall_cycles", "hot_instructions.hits",
        "hot_instructions.source_line"}),
    "list_docs": (set(), {"docs", "docs.path", "docs.title", "docs.sections", "docs.sections.anchor",
                          "docs.sections.title", "docs.sections.tokens"}),
    "search_docs": ({"query", "top_k"}, {"results", "results.path", "results.anchor", "results.title",
                                         "results.snippet", "results.score"}),
    "read_doc": ({"path", "anchor"}, {"path", "anchor", "title", "text", "source"}),
    "read_artifact": ({"artifact_id", "offset", "limit"}, {"artifact_id", "text", "offset", "next_offset", "total"}),
    "job_status": ({"job_id"}, {"job_id", "state"}),
    "job_result": ({"job_id", "wait_s"}, {"job_id", "state"}),
    "cancel_job": ({"job_id"}, {"job_id", "state"}),
}


def _resolve(schema: dict, root: dict) -> dict:
    """Follow $ref, anyOf/oneOf (first object-like branch) and array items down to an object schema."""
    for _ in range(10):
        if "$ref" in schema:
            schema = root["$defs"][schema["$ref"].split("/")[-1]]
        elif "anyOf" in schema or "oneOf" in schema:
            options = [s for s in schema.get("anyOf", schema.get("oneOf")) if s.get("type") != "null"]
            schema = options[0]
        elif "items" in schema:
            schema = schema["items"]
        else:
            return schema
    return schema


def _has_field(root: dict, dotted: str) -> bool:
    schema = root
    for part in dotted.split("."):
        props = _resolve(schema, root).get("properties", {})
        if part not in props:
            return False
        schema = props[part]
    return True


def test_every_contract_name_is_in_the_schemas():
    """Arguments: in the tool's full input schema (evokernel://tools/{name}); tools/list leaves the advanced
    ones out of what a model reads every turn and names them in the description."""
    import json

    async def main():
        async with Client(build_server()) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            full = {}
            for name in CONTRACT:
                res = await c.read_resource(f"evokernel://tools/{name}")
                full[name] = json.loads(res.contents[0].text)["input_schema"]
            return tools, full

    tools, full = anyio.run(main)
    problems = []
    for name, (args, fields) in CONTRACT.items():
        assert name in tools, f"tool {name} missing"
        t = tools[name]
        listed = set(t.input_schema.get("properties", {}))
        hidden = set(full[name]["properties"]) - listed
        assert all(h in t.description for h in hidden if "." not in h), (name, hidden)
        missing_args = args - set(full[name].get("properties", {}))
        problems += [f"{name}: argument {a}" for a in sorted(missing_args)]
        problems += [f"{name}: result field {f}" for f in sorted(fields) if not _has_field(t.output_schema, f)]
    assert not problems, "not in the schemas: " + "; ".join(problems)


def test_every_result_with_numbers_carries_provenance():
    async def main():
        async with Client(build_server()) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    tools = anyio.run(main)
    without = [n for n, t in tools.items() if "provenance" not in (t.output_schema or {}).get("properties", {})]
    assert not without, f"results without provenance: {without}"
