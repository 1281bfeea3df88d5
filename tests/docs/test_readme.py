"""The README a newcomer finishes: at most 400 lines, the Chinese quick start first, its short
settings table the first group of ``.env.prod``, and every relative link of it and of
``docs/`` landing on a file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ENV_PROD = ROOT / ".env.prod"

# Pages other branches of this session write; the README links them already. Whoever merges
# the page removes its name here (the link test then holds for it too).
PAGES_OF_OTHER_BRANCHES = {"docs/memory.md"}


def test_the_readmes_settings_table_is_the_first_group_of_env_prod() -> None:
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## Settings that matter", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([A-Z0-9_]+)` \|", section, re.M)
    env = ENV_PROD.read_text(encoding="utf-8")
    first_group = env.split("# ====", 3)[2]  # between the first group's closing rule and the next
    keys = re.findall(r"^([A-Z0-9_]+)=", first_group, re.M)
    assert len(keys) == 10
    assert listed == keys
    assert "docs/settings.md" in section


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page: its headings' slugs and its explicit ``<a id>``s."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    slugs = {
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.+)$", text, re.M)
    }
    return slugs | set(re.findall(r'<a id="([^"]+)"></a>', text))


def test_every_relative_link_of_the_readme_and_docs_lands_on_a_file_and_anchor() -> None:
    pages = [README, *sorted(DOCS.glob("*.md"))]
    missing = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path = (page.parent / target).resolve() if target else page
            name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else target
            if name in PAGES_OF_OTHER_BRANCHES and not path.exists():
                continue
            if not path.exists():
                missing.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                missing.append(f"{page.name}: {target}#{anchor}")
    assert missing == []


def test_the_readme_is_one_a_newcomer_finishes() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 400
    assert lines[0] == "# TemporalMemory"
    # Chinese first: the quick start in Chinese is the first section
    assert next(line for line in lines if line.startswith("## ")) == "## 快速开始"
