"""The deferred embeddings' window, ended by the test instead of by a timer.

``EMBEDDING_DEFER_WINDOW`` collects the turns stored within it into one embedding call. A test
that asserts "these turns were collected together" raced that window against a loaded machine;
with ``WindowGate`` the window lasts until the test calls ``open``, however long the test takes.
"""

from __future__ import annotations

import asyncio

import pytest

from memory_core.dialogue.deferred_embeddings import DeferredEmbeddings


class WindowGate:
    """Stands in for ``DeferredEmbeddings.wait_window``; ``waits`` has each window asked for."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._opened = asyncio.Event()

    async def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self._opened.wait()

    def open(self) -> None:
        """End the window now (and every later one at once)."""
        self._opened.set()


def gate_the_window(monkeypatch: pytest.MonkeyPatch) -> WindowGate:
    """Make every deferred-embedding window last until the returned gate is opened."""
    gate = WindowGate()
    monkeypatch.setattr(DeferredEmbeddings, "wait_window", staticmethod(gate.wait))
    return gate
