"""HTML built from templates where every value is escaped unless it is already ``Markup``.

No template engine is installed with NoneBot, and the pages are small: ``render`` fills a
``str.format`` template, escaping each value, so text from QQ users (names, messages, facts)
can never become markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any


class Markup(str):
    """Text that is HTML already (built by ``render`` or ``join``); not escaped again."""


def escape(value: Any) -> Markup:
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def render(template: str, **values: Any) -> Markup:
    """``template.format(**values)`` with every value escaped (``Markup`` kept as it is)."""
    return Markup(template.format(**{key: escape(value) for key, value in values.items()}))


def join(parts: Iterable[Markup], separator: str = "") -> Markup:
    return Markup(separator.join(escape(part) for part in parts))
