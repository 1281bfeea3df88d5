"""The one builder of /forget deletes, shared by every table that holds a user's memories."""

from __future__ import annotations


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
