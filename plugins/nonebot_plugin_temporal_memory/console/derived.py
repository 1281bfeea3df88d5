"""A turn's text as the console shows it: what the bot read off a picture is marked, so an
operator can tell it from what the person typed (``memory_core.pictures``)."""

from __future__ import annotations

from memory_core.console import DERIVED_LABEL

from .markup import Markup, escape, join, render


def marked_text(text: str) -> Markup:
    """``text`` escaped, each ``[图片：文字 …]`` in a ``<mark class="derived">``."""
    parts: list[Markup] = []
    end = 0
    for match in DERIVED_LABEL.finditer(text):
        parts.append(escape(text[end : match.start()]))
        parts.append(
            render(
                # The picture marker is drawn by the style sheet (an inline SVG): a server has
                # no emoji font, and the emoji (U+1F5BC) showed as an empty box.
                '<mark class="derived" title="机器从图片中读出的文字">{label}</mark>',
                label=match.group(0),
            )
        )
        end = match.end()
    parts.append(escape(text[end:]))
    return join(parts)
