"""Recall of dialogue turns: the retriever (vector, keyword, time channels, fusion) and ranking."""
