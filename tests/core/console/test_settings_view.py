"""The settings page reads its sections and one-line descriptions from the commented
``.env.prod`` (the one place settings are described), in Chinese, every key described."""

from __future__ import annotations

import re
from pathlib import Path

from memory_core.console import masked_settings, settings_sections
from memory_core.console.settings_view import OTHERS, documented
from memory_core.settings import MemorySettings

ENV_PROD = (Path(__file__).resolve().parents[3] / ".env.prod").read_text(encoding="utf-8")
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_key_of_env_prod_has_a_named_section_and_a_chinese_one_line_description():
    sections, descriptions = documented(ENV_PROD)
    keys = re.findall(r"^([A-Z][A-Z0-9_]*)=", ENV_PROD, re.M)
    assert keys and set(sections) == set(keys) == set(descriptions)
    titles = list(dict.fromkeys(sections.values()))
    assert titles[:3] == ["最常改的十项", "NoneBot 与 OneBot 连接", "存储"]
    assert all(CJK.search(t) and "/" not in t for t in titles), titles
    for key, text in descriptions.items():
        assert CJK.search(text) and "\n" not in text and len(text) <= 120, (key, text)
        assert not re.search(r"/ [a-z]+ [a-z]+ [a-z]+", text), (key, text)  # no English half
    assert descriptions["LLM_MODEL"] == "聊天模型名；空 = 只记录与回忆，不聊天"
    assert descriptions["MEMORY_MCP_READONLY"] == "true = 不能 remember / forget（只能查）"
    assert sections["MEMORY_RECYCLE_DAYS"] == "网页控制台"


def test_settings_follow_the_files_sections_and_a_key_it_does_not_name_comes_last():
    rows = [*masked_settings(MemorySettings()), ("SOMETHING_ELSE", "1")]
    sections = settings_sections(rows, ENV_PROD)
    titles = [s.title for s in sections]
    assert titles[0] == "最常改的十项" and titles[-1] == OTHERS
    assert [k for k, _, _ in sections[-1].rows] == ["SOMETHING_ELSE"]
    first = [k for k, _, _ in sections[0].rows]
    assert first[:2] == ["LLM_BASE_URL", "LLM_API_KEY"]  # the file's order, not the alphabet
    shown = {k: (v, d) for s in sections for k, v, d in s.rows}
    assert shown["LLM_API_KEY"][1] == "聊天 API 密钥，用环境变量传入"
    assert settings_sections(rows, "")[0].title == OTHERS  # no file: one section, no texts


def test_a_list_is_shown_as_env_prod_writes_it():
    shown = dict(masked_settings({"superusers": {"99999"}, "nickname": ["小诗"], "port": 8080}))
    assert shown == {"SUPERUSERS": '["99999"]', "NICKNAME": '["小诗"]', "PORT": "8080"}
