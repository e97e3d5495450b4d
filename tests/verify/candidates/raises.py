"""Raises inside the launcher after printing."""


def run(x, y):
    print("about to fail")
    raise ValueError("candidate bug: bad block size")
