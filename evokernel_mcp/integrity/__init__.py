"""The integrity self-test: a shipped corpus of exploits, replayed against a running server on the attached
device, with the defence each one must meet (`evokernel-mcp integrity`)."""
