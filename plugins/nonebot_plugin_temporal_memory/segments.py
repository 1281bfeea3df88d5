"""OneBot v11 message segments -> the plain text the core stores, embeds and prompts with.

Segments are plain dicts (``{"type": "text", "data": {"text": "hi"}}``) as NapCat, Lagrange and
go-cqhttp send them (go-cqhttp's CQ-code strings are parsed into the same shape by the adapter),
so this module works without any bot framework. Everything that is not text becomes a short,
readable placeholder in brackets: the LLM should know an image was sent, not see a URL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memory_core import image_placeholder

# The classic QQ face ids whose names are stable across clients. NapCat sends the name itself
# (``data.raw.faceText``); go-cqhttp and Lagrange send only the id, so the common ones are named
# here and the rest become a plain ``[表情]``.
FACE_NAMES: dict[int, str] = {
    0: "惊讶",
    1: "撇嘴",
    2: "色",
    3: "发呆",
    4: "得意",
    5: "流泪",
    6: "害羞",
    7: "闭嘴",
    8: "睡",
    9: "大哭",
    10: "尴尬",
    11: "发怒",
    12: "调皮",
    13: "呲牙",
    14: "微笑",
    15: "难过",
    16: "酷",
    18: "抓狂",
    19: "吐",
    20: "偷笑",
    21: "可爱",
    22: "白眼",
    23: "傲慢",
    24: "饥饿",
    25: "困",
    26: "惊恐",
    27: "流汗",
    28: "憨笑",
    29: "悠闲",
    30: "奋斗",
    31: "咒骂",
    32: "疑问",
    33: "嘘",
    34: "晕",
    35: "折磨",
    36: "衰",
    37: "骷髅",
    38: "敲打",
    39: "再见",
    41: "发抖",
    42: "爱情",
    43: "跳跳",
    46: "猪头",
    49: "拥抱",
    53: "蛋糕",
    60: "咖啡",
    63: "玫瑰",
    64: "凋谢",
    66: "爱心",
    67: "心碎",
    74: "太阳",
    75: "月亮",
    76: "赞",
    77: "踩",
    78: "握手",
    79: "胜利",
    96: "冷汗",
    97: "擦汗",
    98: "抠鼻",
    99: "鼓掌",
    100: "糗大了",
    101: "坏笑",
    104: "哈欠",
    105: "鄙视",
    106: "委屈",
    107: "快哭了",
    108: "阴险",
    110: "吓",
    111: "可怜",
    120: "拳头",
    123: "NO",
    124: "OK",
    172: "眨眼睛",
    173: "泪奔",
    174: "无奈",
    175: "卖萌",
    176: "小纠结",
    178: "斜眼笑",
    179: "doge",
    180: "惊喜",
    182: "笑哭",
    183: "我最美",
    212: "托腮",
    264: "捂脸",
    265: "辣眼睛",
    266: "哦哟",
    267: "头秃",
    268: "问号脸",
    269: "暗中观察",
    270: "emm",
    271: "吃瓜",
    272: "呵呵哒",
    273: "我酸了",
    277: "汪汪",
    281: "无眼笑",
    282: "敬礼",
    284: "面无表情",
    285: "摸鱼",
    287: "哦",
    289: "睁眼",
    293: "摸锦鲤",
    294: "期待",
    297: "拜谢",
    299: "牛啊",
    307: "喵喵",
    312: "变形",
    318: "崇拜",
    319: "比心",
    320: "庆祝",
    322: "拒绝",
    323: "嫌弃",
}

# Segment types that carry no words of their own: a fixed placeholder is all the LLM needs.
_PLACEHOLDERS: dict[str, str] = {
    "record": "[语音]",
    "video": "[视频]",
    "forward": "[合并转发]",
    "node": "[合并转发]",
    "poke": "[戳一戳]",
    "shake": "[窗口抖动]",
    "rps": "[猜拳]",
    "anonymous": "",
    "markdown": "[消息]",
    "xml": "[卡片消息]",
    "contact": "[推荐名片]",
    "music": "[音乐分享]",
    "redbag": "[红包]",
    "gift": "[礼物]",
}

QUOTE_MAX_CHARS = 60


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _face(data: Mapping[str, Any]) -> str:
    raw = data.get("raw")
    if isinstance(raw, Mapping):
        name = _text_of(raw.get("faceText")).strip().lstrip("/")
        if name:
            return f"[表情:{name}]"
    try:
        face_id = int(_text_of(data.get("id")))
    except ValueError:
        return "[表情]"
    name = FACE_NAMES.get(face_id, "")
    return f"[表情:{name}]" if name else "[表情]"


def _json_card(data: Mapping[str, Any]) -> str:
    # QQ mini-program / link cards: the "prompt" field is the one-line title QQ itself shows.
    try:
        card = json.loads(_text_of(data.get("data")))
    except ValueError:
        return "[卡片消息]"
    prompt = _one_line(_text_of(card.get("prompt"))) if isinstance(card, dict) else ""
    if not prompt:
        return "[卡片消息]"
    return prompt if prompt.startswith("[") else f"[卡片消息:{prompt}]"


def _at(
    data: Mapping[str, Any],
    self_id: str | None,
    self_name: str | None,
    names: Mapping[str, str],
) -> str:
    qq = _text_of(data.get("qq")).strip()
    if not qq:
        return ""
    if qq == "all":
        return "@全体成员"
    if self_id is not None and qq == self_id and self_name:
        return f"@{self_name}"
    name = names.get(qq) or _one_line(_text_of(data.get("name"))).strip().lstrip("@")
    return f"@{name}" if name else f"@{qq}"


def segment_to_text(
    segment: Mapping[str, Any],
    *,
    self_id: int | str | None = None,
    self_name: str | None = None,
    names: Mapping[str, str] | None = None,
) -> str:
    """One segment as text. Unknown types become ``[type]``; malformed ones become ``""``."""
    kind = _text_of(segment.get("type")).strip()
    data = segment.get("data")
    if not isinstance(data, Mapping):
        data = {}
    if kind == "text":
        return _text_of(data.get("text"))
    if kind == "at":
        return _at(data, None if self_id is None else str(self_id), self_name, names or {})
    if kind == "face":
        return _face(data)
    if kind in ("mface", "marketface"):  # NapCat's mface, a market face on other clients
        summary = _text_of(data.get("summary")).strip().strip("[]")
        return f"[表情:{summary}]" if summary else "[表情]"
    if kind == "image":
        return image_placeholder(data)
    if kind == "reply":
        return "[回复]"
    if kind == "dice":
        result = _text_of(data.get("result")).strip()
        return f"[骰子:{result}]" if result else "[骰子]"
    if kind == "file":
        name = _one_line(_text_of(data.get("name") or data.get("file"))).strip()
        return f"[文件:{name}]" if name else "[文件]"
    if kind == "share":
        title = _one_line(_text_of(data.get("title"))).strip()
        return f"[分享:{title}]" if title else "[分享]"
    if kind == "location":
        title = _one_line(_text_of(data.get("title") or data.get("content"))).strip()
        return f"[位置:{title}]" if title else "[位置]"
    if kind == "json":
        return _json_card(data)
    if kind in _PLACEHOLDERS:
        return _PLACEHOLDERS[kind]
    return f"[{kind}]" if kind else ""


def flatten_segments(
    segments: Sequence[Mapping[str, Any]],
    *,
    self_id: int | str | None = None,
    self_name: str | None = None,
    names: Mapping[str, str] | None = None,
) -> str:
    """Join segments into one text, trimmed at both ends.

    ``self_id``/``self_name`` show an @ of the bot by the bot's name; ``names`` maps QQ numbers
    (as strings) to display names for other @ mentions (the segment's own ``name`` is used
    otherwise, then the number).
    """
    parts = [
        segment_to_text(seg, self_id=self_id, self_name=self_name, names=names)
        for seg in segments
        if isinstance(seg, Mapping)
    ]
    return "".join(parts).strip()


def quote_reply(sender_name: str | None, text: str, *, max_chars: int = QUOTE_MAX_CHARS) -> str:
    """A quoted message as a one-line prefix: ``[回复 小明: 原文…]``."""
    body = _one_line(text)
    if len(body) > max_chars:
        body = body[:max_chars] + "…"
    who = _one_line(sender_name or "").strip()
    if who and body:
        return f"[回复 {who}: {body}]"
    if body:
        return f"[回复: {body}]"
    return f"[回复 {who}]" if who else "[回复]"


def with_quote(quote: str | None, text: str) -> str:
    """Put a quote line before the message text (either may be empty)."""
    if not quote:
        return text
    return f"{quote} {text}".strip() if text else quote


def at_targets(segments: Sequence[Mapping[str, Any]]) -> list[str]:
    """The QQ numbers @-mentioned in the segments (not ``all``), in order, without repeats."""
    seen: list[str] = []
    for seg in segments:
        if not isinstance(seg, Mapping) or seg.get("type") != "at":
            continue
        data = seg.get("data")
        qq = _text_of(data.get("qq")).strip() if isinstance(data, Mapping) else ""
        if qq and qq != "all" and qq not in seen:
            seen.append(qq)
    return seen
