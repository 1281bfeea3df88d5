"""Scoring finished exchanges, the retention bands they fall in, the queue and the purge."""
