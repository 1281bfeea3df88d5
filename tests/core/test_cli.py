"""`python -m memory_core`: import, recall (text, --json, --batch), stats, reembed.

Import of QQ exports and export: tests/core/transfer/test_transfer_cli.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cli_runner import run_cli, run_program
from tests.conftest import new_database

TURNS = [
    {
        "user_id": 1,
        "group_id": None,
        "role": "user",
        "content": "我的订单号是ORD123456",
        "sender_name": "小明",
        "message_id": 1,
        "created_at": "2024-01-16T10:30:15+08:00",
        "self_id": 10001,
    },
    {
        "user_id": 1,
        "group_id": None,
        "role": "assistant",
        "content": "好的，我记住了订单号ORD123456",
        "sender_name": "小诗",
        "message_id": 2,
        "created_at": "2024-01-16T10:30:20+08:00",
        "self_id": 10001,
    },
    {
        "user_id": 1,
        "group_id": 777,
        "role": "user",
        "content": "群里说的订单号是ORD999",
        "message_id": 3,
        "created_at": "2024-01-16T11:00:00+08:00",
        "self_id": 10001,
    },
    {
        "user_id": 2,
        "group_id": None,
        "role": "user",
        "content": "别人的订单号ORD000",
        "message_id": 4,
        "created_at": "2024-01-16T11:00:00+08:00",
    },
]


def import_turns(dsn: str, data_dir: Path) -> tuple[str, Path]:
    """``TURNS`` imported by the CLI, with two bad lines it reports and skips."""
    path = data_dir / "turns.jsonl"
    lines = [json.dumps(t, ensure_ascii=False) for t in TURNS]
    lines.insert(2, '{"user_id": "not a number", "role": "user", "content": "x"}')
    lines.insert(3, "not json at all")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli("import", str(path), dsn=dsn, data_dir=data_dir)
    assert "stored 4 new in 3 session(s)" in result.stdout, result.stderr
    assert "turns/s" in result.stderr  # progress
    assert ":3: skipped" in result.stderr and ":4: skipped" in result.stderr
    assert result.returncode == 1  # bad lines are reported in the exit code
    return dsn, data_dir


@pytest.fixture
def imported(fresh_dsn: str, tmp_data_dir: Path) -> tuple[str, Path]:
    """``TURNS`` imported into this test's own database (for tests that change it)."""
    return import_turns(fresh_dsn, tmp_data_dir)


@pytest.fixture(scope="module")
async def module_dsn(pg_server_dsn: str, migrated_template: str) -> AsyncIterator[str]:
    async with new_database(pg_server_dsn, template=migrated_template) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def imported_once(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """``TURNS`` imported once for the module's tests that only read (recall, stats, refused
    options): each CLI import is a Python start and a model load."""
    return import_turns(module_dsn, tmp_path_factory.mktemp("cli"))


def test_import_then_recall_prints_the_seed_formatted_block(imported_once):
    dsn, data_dir = imported_once
    result = run_cli(
        "recall",
        "--user-id",
        "1",
        "--now",
        "2024-01-16T16:00:00+08:00",
        "订单号是多少",
        dsn=dsn,
        data_dir=data_dir,
    )
    assert result.returncode == 0, result.stderr
    assert "[2024-01-16 10:30:15] (5小时前) user(小明): 我的订单号是ORD123456" in result.stdout
    assert "ORD999" not in result.stdout and "ORD000" not in result.stdout


def test_recall_json_holds_exactly_the_session_turns_in_time_order(imported_once):
    dsn, data_dir = imported_once
    result = run_cli(
        "recall",
        "--user-id",
        "1",
        "--group-id",
        "777",
        "--json",
        "订单号",
        dsn=dsn,
        data_dir=data_dir,
    )
    data = json.loads(result.stdout)
    assert data["query"] == "订单号"
    assert [t["content"] for t in data["turns"]] == ["群里说的订单号是ORD999"]
    assert set(data["turns"][0]) == {
        "id",
        "message_id",
        "role",
        "content",
        "created_at",
        "user_id",
        "group_id",
    }
    assert data["turns"][0]["group_id"] == 777 and data["turns"][0]["message_id"] == 3


def test_recall_batch_prints_one_json_object_per_query_in_order(imported_once):
    dsn, data_dir = imported_once
    queries = data_dir / "queries.jsonl"
    queries.write_text(
        "\n".join(
            json.dumps(q, ensure_ascii=False)
            for q in [
                {"user_id": 2, "group_id": None, "query": "订单"},
                {
                    "user_id": 1,
                    "group_id": None,
                    "query": "订单",
                    "top_n": 1,
                    "window_size": 1,
                    "now": "2024-01-16T10:30:16+08:00",
                },
            ]
        ),
        encoding="utf-8",
    )
    result = run_cli("recall", "--batch", str(queries), dsn=dsn, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert [t["content"] for t in first["turns"]] == ["别人的订单号ORD000"]
    # At 10:30:16 the assistant's reply (10:30:20) did not exist yet.
    assert [t["role"] for t in second["turns"]] == ["user"]


def test_recall_batch_takes_the_conversation_and_names_a_bad_one(imported_once):
    dsn, data_dir = imported_once
    queries = data_dir / "queries.jsonl"
    asked = {"user_id": 1, "query": "是多少来着", "top_n": 1, "window_size": 0}
    queries.write_text(
        json.dumps({**asked, "context": ["我的订单号你还记得吗"]}, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    result = run_cli("recall", "--batch", str(queries), dsn=dsn, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    [turn] = json.loads(result.stdout)["turns"]
    assert "ORD123456" in turn["content"]  # the line before the message names the order
    queries.write_text(json.dumps({**asked, "context": "我的订单号"}, ensure_ascii=False))
    result = run_cli("recall", "--batch", str(queries), dsn=dsn, data_dir=data_dir)
    assert result.returncode != 0
    assert ":1: context must be a list of strings" in result.stderr
    assert "Traceback" not in result.stderr


def test_recall_earlier_lines_give_a_topicless_message_its_topic(fresh_dsn, tmp_data_dir):
    path = tmp_data_dir / "topics.jsonl"
    said = ["我家猫咪豆豆最近老是吐毛球", "我最近在学吉他，手指好疼"]
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "user_id": 5,
                    "role": "user",
                    "content": content,
                    "message_id": 50 + number,
                    "created_at": f"2024-01-1{number}T10:00:00+08:00",
                },
                ensure_ascii=False,
            )
            for number, content in enumerate(said, 1)
        ),
        encoding="utf-8",
    )
    result = run_cli("import", str(path), dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert result.returncode == 0, result.stderr
    found = []
    for earlier in ("我家猫咪吐毛球的事", "我学吉他手指疼的事"):
        args = ["--user-id", "5", "--top-n", "1", "--window", "0", "--earlier", earlier]
        result = run_cli("recall", *args, "后来怎么样了", dsn=fresh_dsn, data_dir=tmp_data_dir)
        assert result.returncode == 0, result.stderr
        found.append(result.stdout)
        as_json = run_cli(
            "recall", *args, "--json", "后来怎么样了", dsn=fresh_dsn, data_dir=tmp_data_dir
        )
        [turn] = json.loads(as_json.stdout)["turns"]
        found.append(turn["content"])
    assert said[0] in found[0] and said[0] == found[1]  # the same message, two topics
    assert said[1] in found[2] and said[1] == found[3]


def test_stats_reports_counts_and_model(imported_once):
    dsn, data_dir = imported_once
    result = run_cli("stats", "--json", dsn=dsn, data_dir=data_dir)
    data = json.loads(result.stdout)
    assert data["rows"] == 4 and data["sessions"] == 3
    assert data["by_chat_type_role"] == {"private/user": 2, "private/assistant": 1, "group/user": 1}
    assert data["embedding_dim"] == 384
    # Times in MEMORY_TIMEZONE (Asia/Shanghai by default), as every time shown.
    assert data["oldest"] == "2024-01-16T10:30:15+08:00"


def test_stats_prints_the_sectioned_chinese_dashboard_of_memstat(imported_once):
    dsn, data_dir = imported_once
    result = run_cli("stats", dsn=dsn, data_dir=data_dir, LLM_MODEL="")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("📊 记忆统计（截至 ")
    sections = [line for line in lines if line.startswith("【")]
    assert sections == ["【存储】", "【评估】", "【提炼】", "【缓存】", "【连接】"]
    assert "聊天模型：未配置" in lines
    assert "数据库：正常（外部 PostgreSQL）" in lines  # a DSN was given
    assert not any(line.startswith("已运行") for line in lines)  # no bot is running


def test_bad_settings_give_a_clear_error_not_a_traceback(tmp_data_dir):
    # Settings are read before any connection: a database nobody listens on is never asked (a
    # CLI that connected first would fail on it instead, and the assertions below would see).
    nowhere = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"
    # As the program itself: the exit status and stderr are a process's.
    result = run_program("stats", dsn=nowhere, data_dir=tmp_data_dir, MEMORY_TIMEZONE="Mars/Base")
    assert result.returncode == 2
    assert "unknown timezone" in result.stderr and "Traceback" not in result.stderr


def test_switching_model_is_refused_then_reembed_fixes_it(imported):
    dsn, data_dir = imported
    # A different local dimension is a config error; an API model with another name needs
    # a server, so fake the switch by renaming the stored model.
    import asyncio

    import asyncpg

    async def rename() -> None:
        conn = await asyncpg.connect(dsn)
        await conn.execute(
            "UPDATE memory_meta SET value = 'old/model' WHERE key = 'embedding_model'"
        )
        await conn.execute("UPDATE dialogues SET embedding_model = 'old/model'")
        await conn.close()

    asyncio.run(rename())
    refused = run_cli("stats", dsn=dsn, data_dir=data_dir)
    assert refused.returncode == 2
    assert "python -m memory_core reembed" in refused.stderr
    fixed = run_cli("reembed", dsn=dsn, data_dir=data_dir)
    assert fixed.returncode == 0, fixed.stderr
    assert "re-embedded 4 rows" in fixed.stdout
    assert run_cli("stats", dsn=dsn, data_dir=data_dir).returncode == 0


def test_purge_deletes_expired_rows_at_the_given_time(imported):
    dsn, data_dir = imported
    import asyncio

    import asyncpg

    async def expire() -> None:
        conn = await asyncpg.connect(dsn)
        await conn.execute(
            "UPDATE dialogues SET expires_at = '2024-01-17T00:00:00+08:00' WHERE user_id = 2"
        )
        await conn.close()

    asyncio.run(expire())
    early = run_cli("purge", "--now", "2024-01-16T23:00:00+08:00", dsn=dsn, data_dir=data_dir)
    assert "purged 0 expired rows" in early.stdout, early.stderr
    late = run_cli("purge", "--now", "2024-01-17T01:00:00+08:00", dsn=dsn, data_dir=data_dir)
    assert "purged 1 expired rows" in late.stdout
    stats = json.loads(run_cli("stats", "--json", dsn=dsn, data_dir=data_dir).stdout)
    assert stats["rows"] == 3
    assert stats["evaluation"]["purged_total"] == 1


def test_import_indexes_the_sessions_it_takes_past_the_exact_search_limit(
    fresh_dsn: str, tmp_data_dir: Path
):
    path = tmp_data_dir / "turns.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TURNS), encoding="utf-8")
    limit = {"MEMORY_EXACT_SEARCH_MAX_ROWS": "1"}  # only user 1's private chat holds 2 rows
    result = run_cli("import", str(path), dsn=fresh_dsn, data_dir=tmp_data_dir, **limit)
    assert result.returncode == 0, result.stderr
    result = run_cli("stats", "--json", dsn=fresh_dsn, data_dir=tmp_data_dir, **limit)
    index = json.loads(result.stdout)["vector_index"]
    assert index == {"mode": "auto", "indexed_sessions": 1, "building": 0}


@pytest.mark.parametrize(
    "command",
    [
        ("recall", "--user-id", "1", "--now", "0001-01-01T00:00:00+00:00", "订单号"),
        ("purge", "--now", "9999-12-31T23:59:59.999999+00:00"),
    ],
    ids=["recall", "purge"],
)
def test_a_time_at_the_calendars_ends_is_refused_naming_the_option(imported_once, command):
    dsn, data_dir = imported_once
    result = run_cli(*command, dsn=dsn, data_dir=data_dir)
    assert result.returncode == 2
    assert "--now" in result.stderr and "Traceback" not in result.stderr
    assert "1990-01-01" in result.stderr or "2200-01-01" in result.stderr


def test_account_names_whose_memory_import_and_recall_use(imported, tmp_path):
    dsn, data_dir = imported

    def recall(account: str) -> str:
        result = run_cli(
            "--account", account, "recall", "--user-id", "1", "订单号", dsn=dsn, data_dir=data_dir
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    # The first account named adopts what was imported before any account was.
    assert "ORD123456" in recall("10001")
    assert "ORD123456" not in recall("20002")
    line = {"user_id": 1, "role": "user", "content": "B 的订单号是ORD777"}
    path = tmp_path / "b.jsonl"
    path.write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    result = run_cli("--account", "20002", "import", str(path), dsn=dsn, data_dir=data_dir)
    assert "stored 1 new in 1 session(s)" in result.stdout, result.stderr
    assert "ORD777" in recall("20002") and "ORD777" not in recall("10001")
