"""Kills its own process (like a hard abort inside a kernel library)."""
import os


def run(x, y):
    os._exit(3)
