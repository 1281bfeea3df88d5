"""The plugin's metadata is what the NoneBot store reads, and agrees with its distribution."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PLUGIN_PYPROJECT = Path(__file__).resolve().parents[2] / "plugins" / "pyproject.toml"


def test_plugin_metadata_names_an_application_for_onebot_v11_with_its_config(plugin: Any) -> None:
    import nonebot

    import nonebot_plugin_temporal_memory as package
    from nonebot_plugin_temporal_memory.config import Config

    meta = plugin.metadata
    assert meta is package.__plugin_meta__
    assert meta.type == "application"
    assert meta.config is Config
    assert meta.supported_adapters == {"~onebot.v11"}
    assert meta.homepage == package.HOMEPAGE and meta.homepage.startswith("https://")
    # Nothing else in this test session requires them: the plugin's require() calls did.
    loaded = {each.id_ for each in nonebot.get_loaded_plugins()}
    assert "nonebot_plugin_localstore" in loaded


def test_the_distribution_names_the_same_homepage_and_module(plugin: Any) -> None:
    import nonebot_plugin_temporal_memory as package

    project = tomllib.loads(PLUGIN_PYPROJECT.read_text(encoding="utf-8"))["project"]
    assert project["name"] == "nonebot-plugin-temporal-memory"
    assert project["urls"]["Homepage"] == package.HOMEPAGE
    assert any(dep.startswith("nonebot-plugin-localstore") for dep in project["dependencies"])
