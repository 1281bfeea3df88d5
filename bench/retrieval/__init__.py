"""Retrieval quality benchmark (issue 6): ``python -m bench.retrieval``."""
