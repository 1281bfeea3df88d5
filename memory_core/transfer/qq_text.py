"""Reading the QQ PC client's text export (消息管理器 → 导出为 .txt).

The file starts with a few header lines and then holds one block per message::

    消息记录（此消息记录为文本格式，不支持重新导入）

    ================================================================
    消息分组:我的好友
    ================================================================
    消息对象:小明
    ================================================================

    2024-01-16 10:30:15 小明(123456)
    你好

    2024-01-16 10:31:02 我<me@example.com>
    在的

Clients differ: the sender may carry a QQ number in half- or full-width parentheses, an e-mail
address in angle brackets, or nothing; a group title may precede the name (【管理员】); dates
may use ``/`` and unpadded numbers; the file may be UTF-8 (with or without BOM), UTF-16 (QQ's
own "Unicode") or GB18030, with CRLF line ends (``encoding.decode_export``). An export of
several chats repeats the ``消息对象`` header before each; two exports joined into one file
(``cat a.txt b.txt``) repeat the whole header, BOM included. Times carry no zone: they are the
exporting PC's local time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

SYSTEM_SENDERS = frozenset({"系统消息"})
SYSTEM_QQ = 10000  # QQ's own notices ("xx撤回了一条消息", group joins) come from this number

_HEADER = re.compile(
    r"^(?P<y>\d{4})[-/.](?P<mo>\d{1,2})[-/.](?P<d>\d{1,2})\s+"
    r"(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2}))?(?:\s+(?P<who>.*?))?\s*$"
)
_QQ_SUFFIX = re.compile(r"^(?P<name>.*?)\s*[(（](?P<qq>\d{5,12})[)）]$")
_EMAIL_SUFFIX = re.compile(r"^(?P<name>.*?)\s*<(?P<email>[^<>]*)>$")
_TITLE_PREFIX = re.compile(r"^【[^】]*】\s*")
_SEPARATOR = re.compile(r"^={8,}$")
# An export's first line: where two exports were joined into one file, the second begins here.
_TITLE = re.compile(r"^消息记录\s*[（(]此消息记录为文本格式")
_FIELD = re.compile(r"^(?P<key>消息记录|消息分组|消息对象)\s*[:：（(]?\s*(?P<value>.*?)[）)]?\s*$")


@dataclass(frozen=True)
class QQTextMessage:
    """One message block: the line of its header, local (naive) time, sender, text."""

    line: int
    time: datetime
    sender: str
    qq: int | None
    chat: str | None  # the 消息对象 it was exported under
    text: str

    @property
    def is_system(self) -> bool:
        return self.qq == SYSTEM_QQ or self.sender in SYSTEM_SENDERS


@dataclass(frozen=True)
class LineProblem:
    """A line that could not be read, and why (reported as ``file:line: why``)."""

    line: int
    reason: str


@dataclass(frozen=True)
class QQTextExport:
    messages: tuple[QQTextMessage, ...]
    problems: tuple[LineProblem, ...]
    chats: tuple[str, ...]  # the 消息对象 names, in file order


def _sender(who: str) -> tuple[str, int | None]:
    who = _TITLE_PREFIX.sub("", who.strip())
    if match := _QQ_SUFFIX.match(who):
        return match["name"].strip(), int(match["qq"])
    if match := _EMAIL_SUFFIX.match(who):
        return match["name"].strip() or match["email"], None
    return who, None


@dataclass
class _Block:
    line: int
    time: datetime
    sender: str
    qq: int | None
    chat: str | None
    body: list[str]

    def message(self) -> QQTextMessage | None:
        text = "\n".join(self.body).strip("\n")
        if not text.strip():
            return None
        return QQTextMessage(self.line, self.time, self.sender, self.qq, self.chat, text)


def parse_qq_text(text: str) -> QQTextExport:
    """Messages and unreadable lines of an export's text (see the module docstring).

    A line before the first message that is neither a header field, a separator nor blank is a
    problem; so is a message header whose date does not exist (its text is dropped with it).
    Any other line after a header belongs to that message.
    """
    messages: list[QQTextMessage] = []
    problems: list[LineProblem] = []
    chats: list[str] = []
    chat: str | None = None
    block: _Block | None = None
    in_header = True  # before the first message, or after a separator
    dropping = False  # the lines after a header that could not be read belong to it

    def close() -> None:
        nonlocal block
        if block is not None and (message := block.message()) is not None:
            messages.append(message)
        block = None

    for number, raw in enumerate(text.splitlines(), start=1):
        raw = raw.lstrip("\ufeff")  # the BOM of a second export joined to the first
        line = raw.rstrip()
        if _SEPARATOR.match(line) or _TITLE.match(line):
            close()
            in_header, dropping = True, False
            continue
        if in_header and (field := _FIELD.match(line.strip())):
            if field["key"] == "消息对象":
                chat = field["value"] or None
                if chat is not None and chat not in chats:
                    chats.append(chat)
            continue
        header = _HEADER.match(line)
        if header is not None:
            close()
            in_header, dropping = False, False
            try:
                when = datetime(
                    int(header["y"]),
                    int(header["mo"]),
                    int(header["d"]),
                    int(header["h"]),
                    int(header["mi"]),
                    int(header["s"] or 0),
                )
            except ValueError as exc:
                problems.append(
                    LineProblem(
                        number, f"no such time in {line.strip()!r} ({exc}); its message is skipped"
                    )
                )
                dropping = True
                continue
            name, qq = _sender(header["who"] or "")
            block = _Block(number, when, name, qq, chat, [])
            continue
        if block is not None:
            block.body.append(raw.rstrip("\r"))
        elif line.strip() and not dropping:
            problems.append(
                LineProblem(
                    number,
                    "not a message header (expected 'YYYY-MM-DD HH:MM:SS 昵称(QQ号)')",
                )
            )
    close()
    return QQTextExport(tuple(messages), tuple(problems), tuple(chats))
