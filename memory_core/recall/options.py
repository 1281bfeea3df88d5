"""How one dialogue recall is to be made: built once by whoever asks, read only by the
retriever (``recall.retriever.Retriever.recall`` says what each option does)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..models import Role
from ..settings import RetrievalMode
from .fusion import FusionRecipe
from .ranking import AnchorFloor


@dataclass(frozen=True)
class RecallOptions:
    """The knobs of one recall; ``None`` means the setting (MEMORY_TOP_N, MEMORY_WINDOW_SIZE),
    the shipped choice (hybrid, the ``rrf`` recipe, time words understood: ``recall.retriever``)
    and ``now`` the current time. ``fusion`` is a recipe of ``recall.fusion.FUSIONS``.

    ``roles`` limits anchors to those roles, ``keywords`` to turns containing every one of
    them; ``context`` is the session's lines before the query, oldest first; ``since`` keeps
    anchors at or after that time (``now`` is the other end)."""

    top_n: int | None = None
    window_size: int | None = None
    now: datetime | None = None
    roles: tuple[Role, ...] | None = None
    keywords: tuple[str, ...] | None = None
    mode: RetrievalMode | None = None
    time_aware: bool | None = None
    context: tuple[str, ...] = ()
    since: datetime | None = None
    fusion: FusionRecipe | None = None
    shown: tuple[int, ...] = ()
    anchor_floor: AnchorFloor | None = None

    # ``shown``: turns already in the prompt (its short-term memory); the prompt's recall
    # (no top_n, no window) neither spends its allowance on them nor counts them in it.
    # ``anchor_floor``: which weak anchors the prompt's recall leaves out (default:
    # ``recall.ranking.ANCHOR_FLOOR``; ``NO_FLOOR`` spends on every anchor).

    def __post_init__(self) -> None:
        # Lists given by a caller become tuples, so the value stays what it was when built.
        for name in ("roles", "keywords", "context", "shown"):
            value: Sequence[object] | None = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))


DEFAULT_RECALL = RecallOptions()
