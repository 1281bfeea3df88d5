"""Distilled memory: facts, preferences and summaries extracted from dialogue, kept and recalled."""
