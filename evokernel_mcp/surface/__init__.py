"""The MCP surface: what an agent sees of the tools, generic for every tool (also ones added later).

- registry.py: title + annotations per tool (a safe default for unknown ones), which tools are long.
- schema.py: compact input schemas (what a model reads every turn), typed patches (enums, options),
  output schemas that admit the shaped results and the job handle.
- strict.py: unknown arguments are an error naming the closest valid one (difflib), at every depth.
- shaping.py: results sized for a context window (nulls omitted, numbers rounded, provenance deduplicated,
  over-budget lists moved to an artifact).
- verdict.py: the text block: the verdict and its reason in one or two lines.
- output_schema.py: the full output schemas and the compact ones tools/list carries.
- server.py: EvoServer, the MCPServer subclass that applies all of the above around each tool call.
- prompts.py, completions.py: MCP prompts and completion/complete.
- http.py: streamable HTTP with a bearer token and Host/Origin checks.
"""
