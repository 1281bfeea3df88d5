"""``python -m memory_core import --format … / export``, as an operator runs them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runner import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
PRIVATE = str(FIXTURES / "qq_private.txt")
TARGET = ("--user-id", "123456", "--self-id", "10001")


def test_dry_run_prints_each_turn_and_a_second_dry_run_still_finds_nothing_stored(
    fresh_dsn: str, tmp_data_dir: Path
):
    result = run_cli("import", PRIVATE, *TARGET, "--dry-run", dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert result.returncode == 0, result.stderr
    assert "format: qq-txt (from the file name" in result.stderr
    assert (
        "would store [2024-01-16 10:32:40] session 123456 user(小明): "
        "对了，我的订单号是ORD20240116 ⏎ 帮我记一下"
    ) in result.stdout
    assert "would store [2024-01-16 10:31:02] session 123456 assistant(小诗):" in result.stdout
    assert "would store 5 new in 1 session(s); 0 already stored" in result.stdout
    again = run_cli("import", PRIVATE, *TARGET, "--dry-run", dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert "would store 5 new" in again.stdout


def test_import_reports_progress_and_a_second_run_adds_nothing(fresh_dsn: str, tmp_data_dir: Path):
    first = run_cli("import", PRIVATE, *TARGET, dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert first.returncode == 0, first.stderr
    assert "5 turns read, 5 new" in first.stderr
    assert "stored 5 new in 1 session(s); 0 already stored; 1 system notices skipped" in (
        first.stdout
    )
    second = run_cli("import", PRIVATE, *TARGET, dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert "stored 0 new in 0 session(s); 5 already stored" in second.stdout
    recall = run_cli(
        "recall", "--user-id", "123456", "--json", "订单号", dsn=fresh_dsn, data_dir=tmp_data_dir
    )
    assert "ORD20240116" in recall.stdout


def test_a_qq_export_without_a_target_is_refused_with_what_to_add(
    fresh_dsn: str, tmp_data_dir: Path
):
    result = run_cli("import", PRIVATE, dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert result.returncode == 2
    assert "--user-id QQ (a private chat) or --group-id GROUP" in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_export_names_its_bad_lines_and_exits_1(fresh_dsn: str, tmp_data_dir: Path):
    path = str(FIXTURES / "qq_malformed.txt")
    result = run_cli("import", path, "--format", "qq-txt", "--user-id", "123456",
                     dsn=fresh_dsn, data_dir=tmp_data_dir)  # fmt: skip
    assert result.returncode == 1
    assert f"{path}:1: skipped: not a message header" in result.stderr
    assert f"{path}:7: skipped: no such time in '2024-02-30 08:00:00 小明(123456)'" in result.stderr
    assert "stored 2 new" in result.stdout


def test_an_unreadable_file_is_a_clear_error(fresh_dsn: str, tmp_data_dir: Path):
    result = run_cli("import", str(tmp_data_dir / "missing.txt"), "--user-id", "1",
                     dsn=fresh_dsn, data_dir=tmp_data_dir)  # fmt: skip
    assert result.returncode == 2
    assert "error:" in result.stderr and "missing.txt" in result.stderr
    assert "Traceback" not in result.stderr


def test_export_writes_json_lines_that_import_reads_back(fresh_dsn: str, tmp_data_dir: Path):
    run_cli("import", PRIVATE, *TARGET, dsn=fresh_dsn, data_dir=tmp_data_dir)
    group = str(FIXTURES / "qq_group_utf16.txt")
    run_cli("import", group, "--group-id", "777", "--self-id", "10001",
            dsn=fresh_dsn, data_dir=tmp_data_dir)  # fmt: skip
    out = tmp_data_dir / "backup.jsonl"
    result = run_cli("export", "--session", "777:333333", "-o", str(out),
                     dsn=fresh_dsn, data_dir=tmp_data_dir)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "exported 2 turns and 0 distilled memories (777:333333)" in result.stderr
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["type"] for line in lines] == ["header", "turn", "turn"]
    assert {line["session_key"] for line in lines[1:]} == {"777:333333"}
    back = run_cli("import", str(out), dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert back.returncode == 0, back.stderr
    assert "format: jsonl" in back.stderr
    assert "stored 0 new in 0 session(s); 2 already stored" in back.stdout


def test_a_chatrecorder_sqlite_file_is_recognised_and_shown_in_a_dry_run(
    fresh_dsn: str, tmp_data_dir: Path
):
    import sqlite3

    source = tmp_data_dir / "db.sqlite3"
    with sqlite3.connect(source) as conn:
        conn.executescript((FIXTURES / "chatrecorder_uninfo.sql").read_text(encoding="utf-8"))
    result = run_cli("import", str(source), "--dry-run", dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert result.returncode == 0, result.stderr
    assert "format: chatrecorder" in result.stderr
    assert "would store [2024-01-16 11:01:05] session 777:333333 assistant: 收到，小红带球。" in (
        result.stdout
    )
    assert "would store 5 new in 3 session(s)" in result.stdout
    assert "1 messages without text skipped" in result.stdout


def test_an_export_in_another_locales_encoding_is_read_as_stated(
    fresh_dsn: str, tmp_data_dir: Path
):
    said = "明日は東京に行きます、お土産を買ってくるね"
    export = tmp_data_dir / "japanese.txt"
    export.write_bytes(f"2024-01-16 10:30:15 太郎(123456)\n{said}\n\n".encode("shift_jis"))
    guessed = run_cli(
        "import", str(export), *TARGET, "--dry-run", dsn=fresh_dsn, data_dir=tmp_data_dir
    )
    assert guessed.returncode == 0 and said not in guessed.stdout  # read as GB18030: nonsense
    assert "warning: read as GB18030, but" in guessed.stderr  # and said to be doubtful
    assert "--encoding shift_jis" in guessed.stderr
    stated = run_cli(
        "import", str(export), *TARGET, "--encoding", "shift_jis", "--dry-run",
        dsn=fresh_dsn, data_dir=tmp_data_dir,
    )  # fmt: skip
    assert stated.returncode == 0, stated.stderr
    assert f"user(太郎): {said}" in stated.stdout
    unknown = run_cli(
        "import",
        str(export),
        *TARGET,
        "--encoding",
        "klingon",
        dsn=fresh_dsn,
        data_dir=tmp_data_dir,
    )
    assert unknown.returncode == 2 and "unknown encoding 'klingon'" in unknown.stderr


def test_a_bad_record_is_skipped_by_file_and_line_and_the_good_ones_stored_in_every_format(
    fresh_dsn: str, tmp_data_dir: Path
):
    import sqlite3

    def turn(content: str, **more: object) -> str:
        line = {"user_id": 5005, "role": "user", "content": content, **more}
        return json.dumps(line, ensure_ascii=False)

    deep = (
        '{"type": "text", "data": {"x": ' + "[" * 900 + "]" * 900 + "}}"
    )  # json.loads reads it: storing it did not
    lines = tmp_data_dir / "turns.jsonl"
    lines.write_bytes(
        "\n".join(
            [
                turn("第一行好好的"),
                "[" * 100_000 + "]" * 100_000,  # json.loads: RecursionError
                turn("时间坏了", created_at="昨天下午"),
                turn("段落套得很深").replace(
                    '"content"', '"raw_segments": [' + deep + '], "content"'
                ),
                turn("最后一行也好好的"),
            ]
        ).encode("utf-8")
        + b"\n"
        + turn("这一行是国标编码").encode("gb18030")
        + b"\n"
    )
    imported = run_cli("import", str(lines), dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert imported.returncode == 1
    assert f"{lines}:2: skipped: not JSON this import reads: nested too deeply" in imported.stderr
    assert f"{lines}:3: skipped: created_at: Invalid isoformat string" in imported.stderr
    assert f"{lines}:4: skipped: raw_segments are nested deeper than 64 levels" in imported.stderr
    assert f"{lines}: warning: line(s) 6 are not UTF-8 and were read as GB18030" in (
        imported.stderr
    )
    assert "read as UTF-8, 1 line(s) GB18030; 3 turns read; stored 3 new" in imported.stdout, (
        imported.stdout + imported.stderr
    )
    assert "Traceback" not in imported.stderr

    source = tmp_data_dir / "db.sqlite3"
    with sqlite3.connect(source) as conn:
        conn.executescript((FIXTURES / "chatrecorder_uninfo.sql").read_text(encoding="utf-8"))
        conn.execute(
            "INSERT INTO nonebot_plugin_chatrecorder_messagerecord VALUES "
            "(8, 1, 'not a time', 'message', '1008', '[]', '坏时间的一条')"
        )
    recorded = run_cli("import", str(source), dsn=fresh_dsn, data_dir=tmp_data_dir)
    assert recorded.returncode == 1
    assert f"{source}:record 8: skipped: unreadable record: Invalid isoformat string" in (
        recorded.stderr
    )
    assert "stored 5 new in 3 session(s)" in recorded.stdout
    # the QQ text export: test_malformed_export_names_its_bad_lines_and_exits_1
