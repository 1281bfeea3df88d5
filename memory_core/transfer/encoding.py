"""Which encoding an imported file is in, and when the guess is doubtful.

Chinese Windows exports are UTF-8, UTF-16 or GB18030; GB18030 reads almost any bytes without an
error, so a file of another locale (a Japanese Windows's Shift-JIS) "decodes" into nonsense, and a
UTF-8 file with one line pasted from a GB18030 one used to be read whole as GB18030, turning its
UTF-8 lines into nonsense. Here a file is read line by line where it has to be (UTF-8 where a
line is UTF-8, GB18030 where it is not: a newline byte never occurs inside a character of
either; a file mostly not UTF-8 is GB18030 throughout), the encoding used is named, and a
decode whose letters are mostly rare in Chinese text is reported as doubtful.
"""

from __future__ import annotations

import codecs
import unicodedata
from dataclasses import dataclass

FALLBACK = "GB18030"
RARE_SHARE = 0.2  # letters outside GB2312 above which a GB18030 decode is doubtful
RARE_SAMPLE = 20_000  # letters looked at (enough to tell; a large file is not read twice)
RARE_MIN_LETTERS = 20
SHOWN_LINES = 10


@dataclass(frozen=True)
class DecodedText:
    """A file's text, the encoding it was read in (as a report names it) and warnings."""

    text: str
    encoding: str
    warnings: tuple[str, ...] = ()


def decode_line(raw: bytes) -> tuple[str, bool]:
    """One line: UTF-8, else GB18030 (``True``: it fell back); ``ValueError`` if neither."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("gb18030"), True
    except UnicodeDecodeError as exc:
        raise ValueError(f"not text in UTF-8 or GB18030 (byte {exc.start})") from exc


def utf8_with_fallbacks(lines: list[int]) -> tuple[str, tuple[str, ...]]:
    """The name and warning of a UTF-8 file whose ``lines`` were read as GB18030."""
    if not lines:
        return "UTF-8", ()
    shown = ", ".join(str(n) for n in lines[:SHOWN_LINES])
    more = f" and {len(lines) - SHOWN_LINES} more" if len(lines) > SHOWN_LINES else ""
    return f"UTF-8, {len(lines)} line(s) {FALLBACK}", (
        f"line(s) {shown}{more} are not UTF-8 and were read as {FALLBACK}: check them "
        "(the rest of the file is UTF-8)",
    )


def decode_export(data: bytes, encoding: str | None = None) -> DecodedText:
    """The text of a file: in ``encoding`` when one is stated (an export of another locale:
    a Japanese Windows's Shift-JIS also reads as GB18030, as nonsense); else BOM first, then
    UTF-16 without BOM (NUL bytes), then UTF-8, then each line that is not UTF-8 as GB18030
    (older Windows exports are GB18030 throughout); ``ValueError`` if none fits."""
    if encoding is not None:
        try:
            return DecodedText(data.decode(encoding), encoding)
        except LookupError as exc:
            raise ValueError(f"unknown encoding {encoding!r}") from exc
        except UnicodeDecodeError as exc:
            raise ValueError(f"not text in {encoding} (byte {exc.start} is unreadable)") from exc
    for bom, codec, name in (
        (codecs.BOM_UTF8, "utf-8-sig", "UTF-8"),
        (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"),
        (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"),
    ):
        if data.startswith(bom):
            return DecodedText(data.decode(codec), name)
    if data[:200].count(b"\x00") > 20:  # UTF-16 without a BOM: every ASCII char has a NUL
        return DecodedText(
            data.decode("utf-16-be" if data[:1] == b"\x00" else "utf-16-le"), "UTF-16"
        )
    try:
        return DecodedText(data.decode("utf-8"), "UTF-8")
    except UnicodeDecodeError:
        pass
    return _line_by_line(data)


def _line_by_line(data: bytes) -> DecodedText:
    lines: list[str] = []
    fell_back: list[int] = []
    utf8_non_ascii = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text, fell = decode_line(raw)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from exc
        lines.append(text)
        if fell:
            fell_back.append(number)
        elif not raw.isascii():
            utf8_non_ascii += 1
    if len(fell_back) > utf8_non_ascii:
        # A GB18030 file: a short line of it can happen to be valid UTF-8 too, so it is read
        # whole (GB18030 reads any line decode_line read).
        text = data.decode("gb18030")
        return DecodedText(text, FALLBACK, _doubts(text))
    return DecodedText("\n".join(lines), *utf8_with_fallbacks(fell_back))


def _doubts(text: str) -> tuple[str, ...]:
    share = rare_share(text)
    if share is None or share <= RARE_SHARE:
        return ()
    return (
        f"read as {FALLBACK}, but {share:.0%} of its letters are rare in Chinese text: if the "
        "file comes from a Windows of another locale, give its encoding (--encoding shift_jis "
        "for Japanese, big5 for traditional Chinese)",
    )


def rare_share(text: str) -> float | None:
    """The share of non-ASCII letters outside GB2312 (the common simplified Chinese characters),
    over the first ``RARE_SAMPLE``; ``None`` with fewer than ``RARE_MIN_LETTERS``."""
    letters = rare = 0
    for char in text:
        if char.isascii() or not unicodedata.category(char).startswith("L"):
            continue
        letters += 1
        try:
            char.encode("gb2312")
        except UnicodeEncodeError:
            rare += 1
        if letters >= RARE_SAMPLE:
            break
    return rare / letters if letters >= RARE_MIN_LETTERS else None
