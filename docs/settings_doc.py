"""Write ``docs/settings.md`` from ``.env.prod``: every key with its default and its comment, in
the file's groups and order.

``.env.prod`` is where a setting is described (NoneBot reads it; an operator edits it), so the
reference is made from it rather than written twice. After changing ``.env.prod`` run
``python docs/settings_doc.py`` (``make docs``); ``--check`` exits 1 when the page is out of date
(``tests/docs/test_settings_doc.py`` runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_PROD = ROOT / ".env.prod"
SETTINGS_MD = ROOT / "docs" / "settings.md"

KEY_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
RULE_LINE = re.compile(r"^#\s*={10,}\s*$")
CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef\u3000-\u303f]")
LATIN = re.compile(r"[A-Za-z]")
QUOTED = re.compile(r"\[[^\]]*\]|\"[^\"]*\"|“[^”]*”|`[^`]*`")
SLASH = re.compile(r" ?/ ")  # "中文 / English", also "（…）/ English"


@dataclass(frozen=True)
class Setting:
    key: str
    default: str
    chinese: tuple[str, ...]
    english: tuple[str, ...]


@dataclass
class Group:
    title: str
    settings: list[Setting] = field(default_factory=list)


@dataclass
class EnvFile:
    preface: list[str]
    groups: list[Group]


def is_chinese(line: str) -> bool:
    """A comment line is Chinese when CJK characters are not a small aside in Latin text; what
    an English line quotes ("稍等，我想一想……", [图片：文字 …]) does not count."""
    prose = QUOTED.sub("", line)
    return len(CJK.findall(prose)) * 4 > len(LATIN.findall(prose))


def split_languages(lines: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Chinese and the English lines of one comment; ``中文 / English`` lines are cut."""
    chinese: list[str] = []
    english: list[str] = []
    for line in lines:
        cut = next(
            (
                m.start()
                for m in SLASH.finditer(line)
                if is_chinese(line[: m.start()]) and not is_chinese(line[m.end() :])
            ),
            None,
        )
        if cut is not None:
            chinese.append(line[:cut].strip())
            english.append(line[cut:].lstrip(" /").strip())
        elif is_chinese(line):
            chinese.append(line)
        else:
            english.append(line)
    return tuple(chinese), tuple(english)


def parse(text: str) -> EnvFile:
    """The groups of ``.env.prod`` (a title between two rules of ``=``) and their keys, each
    with the comment lines right above it."""
    preface: list[str] = []
    groups: list[Group] = []
    comment: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if RULE_LINE.match(line):
            # a group's title is the comment lines between two rules; the second only closes it
            end = index
            while end < len(lines) and lines[end].startswith("#"):
                if RULE_LINE.match(lines[end].rstrip()):
                    break
                end += 1
            if end > index and end < len(lines) and RULE_LINE.match(lines[end].rstrip()):
                title = " ".join(t.lstrip("#").strip() for t in lines[index:end])
                groups.append(Group(title))
                index = end + 1
            comment = []
        elif line.startswith("#"):
            comment.append(line.lstrip("#").strip())
        elif match := KEY_LINE.match(line):
            if not groups:
                raise ValueError(f"{match.group(1)}: a key before the first group")
            chinese, english = split_languages(comment)
            groups[-1].settings.append(Setting(match.group(1), match.group(2), chinese, english))
            comment = []
        elif not line:
            if not groups and comment:
                preface.extend(comment)
            comment = []
        else:
            raise ValueError(f".env.prod line {index}: neither a comment nor KEY=value: {line}")
    return EnvFile(preface, groups)


def cell(lines: tuple[str, ...]) -> str:
    """Comment lines as one table cell: wrapped lines joined, ``|`` and ``<`` escaped."""
    text = ""
    for line in lines:
        # a Chinese sentence wrapped over two lines is one sentence: no space at the wrap
        glue = "" if not text or (CJK.match(text[-1]) and CJK.match(line[0])) else " "
        text += glue + line
    return text.replace("|", "\\|").replace("<", "&lt;").replace("~", "\\~")


def render(env: EnvFile) -> str:
    out = [
        "# 全部设置 / every setting",
        "",
        "<!-- Generated from .env.prod by docs/settings_doc.py (make docs); do not edit. -->",
        "",
        "由 `.env.prod` 生成（`make docs`）：请修改 `.env.prod`，不要改本页。",
        "Generated from `.env.prod` (`make docs`): edit that file, not this page.",
        "",
    ]
    chinese, english = split_languages(env.preface[1:])  # [0] is the file's title
    out += [cell(chinese), "", cell(english), ""]
    for number, group in enumerate(env.groups, start=1):
        keys = ", ".join(f"`{s.key}`" for s in group.settings)
        out.append(f"{number}. [{group.title}](#group-{number}): {keys}")
    for number, group in enumerate(env.groups, start=1):
        out += ["", f'<a id="group-{number}"></a>', "", f"## {number}. {group.title}", ""]
        out += ["| key | default | 说明 | description |", "|---|---|---|---|"]
        for setting in group.settings:
            default = f"`{setting.default}`" if setting.default else "(empty)"
            out.append(
                f"| `{setting.key}` | {default} | {cell(setting.chinese)} | "
                f"{cell(setting.english)} |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/settings.md from .env.prod.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    parser.add_argument("--env-file", type=Path, default=ENV_PROD, help="default: .env.prod")
    parser.add_argument("--page", type=Path, default=SETTINGS_MD, help="default: docs/settings.md")
    args = parser.parse_args(argv)
    page = render(parse(args.env_file.read_text(encoding="utf-8")))
    if args.check:
        current = args.page.read_text(encoding="utf-8") if args.page.exists() else ""
        if current != page:
            print(
                f"{args.page} is out of date with {args.env_file}: run `make docs`", file=sys.stderr
            )
            return 1
        return 0
    args.page.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
