"""Giving freed memory back to the system (glibc's ``malloc_trim``).

glibc keeps what a process frees in its heap for later allocations; after a one-off burst
(parsing a model file while a session is built, a picture's working buffers) that is tens to
hundreds of MB the process holds and never uses again. ``give_back`` returns it: called after
the embedding model is loaded and after each picture the OCR worker reads (bench/RESULTS.md).
Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim: Callable[[int], int] | None = getattr(ctypes.CDLL(name), "malloc_trim", None)
    return trim


def give_back() -> None:
    """Return the heap's free memory to the system (a few ms; blocking)."""
    trim = _trim()
    if trim is not None:
        trim(0)
