"""`evokernel-mcp selftest [--capture DIR]`: drive every tool end to end through the MCP client on a shipped task,
report pass/fail/skip with timings and versions, and optionally capture the raw tool outputs as a fixture bundle."""
