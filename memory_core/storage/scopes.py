"""The one reading of a /forget scope: the DELETE shared by every table that holds a user's
memories, and the same test for a turn not yet in the database (``covers``, the spool)."""

from __future__ import annotations

from ..models import ForgetScope, TurnInput


def scope_delete(
    table: str,
    *,
    user_id: int | None,
    group_id: int | None,
    private_only: bool,
    everything: bool,
    extra: str = "",
) -> tuple[str, tuple[int, ...]]:
    """The DELETE of a /forget scope on ``table``: everything, a user in a group, a user's
    private rows, all of a user's rows, or a group's rows.

    ``table`` and ``extra`` are constants of this module, never user input.
    """
    where = f" AND {extra}" if extra else ""
    if everything:
        return f"DELETE FROM {table} WHERE true{where}", ()
    if user_id is not None and group_id is not None:
        return f"DELETE FROM {table} WHERE user_id = $1 AND group_id = $2{where}", (
            user_id,
            group_id,
        )
    if user_id is not None and private_only:
        return f"DELETE FROM {table} WHERE user_id = $1 AND group_id IS NULL{where}", (user_id,)
    if user_id is not None:
        return f"DELETE FROM {table} WHERE user_id = $1{where}", (user_id,)
    if group_id is not None:
        return f"DELETE FROM {table} WHERE group_id = $1{where}", (group_id,)
    raise ValueError("forget needs a user, a group, or everything=True")


def covers(scope: ForgetScope, turn: TurnInput) -> bool:
    """Whether ``scope`` takes ``turn`` (the rows :func:`scope_delete` deletes)."""
    if scope.everything:
        return True
    if scope.user_id is not None and scope.group_id is not None:
        return turn.user_id == scope.user_id and turn.group_id == scope.group_id
    if scope.user_id is not None and scope.private_only:
        return turn.user_id == scope.user_id and turn.group_id is None
    if scope.user_id is not None:
        return turn.user_id == scope.user_id
    if scope.group_id is not None:
        return turn.group_id == scope.group_id
    raise ValueError("forget needs a user, a group, or everything=True")
