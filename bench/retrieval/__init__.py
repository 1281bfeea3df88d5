"""Retrieval quality benchmark: ``python -m bench.retrieval``."""
