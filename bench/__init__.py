"""Benchmark scripts (run as files: python3 bench/<name>.py); a package so that one can reuse another's helpers."""
