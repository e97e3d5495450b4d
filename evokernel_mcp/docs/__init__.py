"""Hardware docs and reference kernels: section index, BM25 search, safe reads (see read.py for the tools)."""
