"""The one reading of a /forget scope: the DELETE shared by every table that holds a user's
memories, the count of what it would delete (the question before it), and the same test for
a turn not yet in the database (``covers``, the spool)."""

from __future__ import annotations

from ..accounts import key_account
from ..models import ForgetScope, TurnInput

# The namespace of a row of a table with a session key (memory_core.accounts).
KEY_ACCOUNT = key_account()


def scope_filter(
    scope: ForgetScope, account_of_row: str = KEY_ACCOUNT
) -> tuple[str, tuple[int | str, ...]]:
    """The WHERE condition of a /forget scope and its ``$n`` arguments: everything, a user in
    a group, a user's private rows, all of a user's rows, or a group's rows — of one QQ
    account's memory (``scope.account``, compared with the SQL ``account_of_row``)."""
    args: tuple[int, ...]
    if scope.everything:
        where, args = "true", ()
    elif scope.user_id is not None and scope.group_id is not None:
        where, args = "user_id = $1 AND group_id = $2", (scope.user_id, scope.group_id)
    elif scope.user_id is not None and scope.private_only:
        where, args = "user_id = $1 AND group_id IS NULL", (scope.user_id,)
    elif scope.user_id is not None:
        where, args = "user_id = $1", (scope.user_id,)
    elif scope.group_id is not None:
        where, args = "group_id = $1", (scope.group_id,)
    else:
        raise ValueError("forget needs a user, a group, or everything=True")
    if scope.account is None:
        # Forgetting decides it first (AccountBook.decide): a scope in no account's memory
        # must never reach SQL, where it would read as another's.
        raise ValueError("a /forget scope's QQ account is not decided yet")
    return f"{where} AND {account_of_row} = ${len(args) + 1}::text", (*args, scope.account)


def _scoped_rows(
    table: str, extra: str, scope: ForgetScope, account_of_row: str
) -> tuple[str, tuple[int | str, ...]]:
    """``FROM table WHERE <scope> [AND extra]`` and its arguments: what a /forget deletes and
    what its question counts are the same rows."""
    where, args = scope_filter(scope, account_of_row)
    extra = f" AND {extra}" if extra else ""
    return f"FROM {table} WHERE {where}{extra}", args


def scope_delete(
    table: str, scope: ForgetScope, *, extra: str = "", account_of_row: str = KEY_ACCOUNT
) -> tuple[str, tuple[int | str, ...]]:
    """The DELETE of a /forget scope on ``table`` (see :func:`scope_filter`).

    ``table`` and ``extra`` are constants of this module's callers, never user input.
    """
    rows, args = _scoped_rows(table, extra, scope, account_of_row)
    return f"DELETE {rows}", args


def scope_count(
    table: str,
    scope: ForgetScope,
    *,
    extra: str = "",
    by: str = "",
    account_of_row: str = KEY_ACCOUNT,
) -> tuple[str, tuple[int | str, ...]]:
    """The ``SELECT count(*)`` of the rows :func:`scope_delete` would delete, per ``by``
    (a column, selected first) when given: what a /forget question names before it asks.

    ``table``, ``extra`` and ``by`` are constants of the callers, never user input.
    """
    rows, args = _scoped_rows(table, extra, scope, account_of_row)
    if by:
        return f"SELECT {by}, count(*) {rows} GROUP BY {by}", args
    return f"SELECT count(*) {rows}", args


def covers(scope: ForgetScope, turn: TurnInput) -> bool:
    """Whether ``scope`` takes ``turn`` (the rows :func:`scope_delete` deletes)."""
    if turn.account is None or scope.account is None:
        # One of them was made before the first account was known: an account's namespace
        # follows from its bot alone, so the same bot means the same memory.
        if turn.self_id != scope.self_id:
            return False
    elif turn.account != scope.account:
        return False
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
