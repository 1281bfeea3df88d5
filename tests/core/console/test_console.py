"""The console's data access on a real PostgreSQL: sessions, browsing one session only, edits
re-embedded and audited, the recycle bin, the debugger, masked settings."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import SecretStr

from memory_core.console import ConsoleConflictError, MemoryConsole, TurnSearch, trace_recall
from memory_core.console.settings_view import MASK, masked_settings
from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import InvalidTurnError, StorageError
from memory_core.models import ForgetScope, TurnInput
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings

T0 = datetime(2026, 11, 20, 4, tzinfo=timezone.utc)
ALICE, BOB, GROUP = 1001, 1002, 5005
ACTOR = "控制台@127.0.0.1"


async def store_chat(memory, rows, start: datetime) -> None:
    """Store ``(user, group, role, content, sender name)`` rows a minute apart from ``start``."""
    for i, (user, group, role, content, name) in enumerate(rows):
        await memory.parts.writer.add_turn(
            TurnInput(
                user_id=user,
                group_id=group,
                role=role,
                content=content,
                sender_name=name,
                created_at=start + timedelta(minutes=i),
            )
        )


async def _seed(memory):
    rows = [
        (ALICE, None, "user", "我家的狗叫旺财，很喜欢吃骨头", "阿丽"),
        (ALICE, None, "assistant", "旺财真可爱", None),
        (ALICE, None, "user", "明天我要去北京出差", "阿丽"),
        (BOB, None, "user", "我家的狗叫大黄，也喜欢骨头", "小波"),
        (BOB, GROUP, "user", "群里说说：狗粮哪家好", "波波"),
        (ALICE, GROUP, "user", "我推荐骨头形状的狗粮", "丽丽"),
    ]
    await store_chat(memory, rows, T0)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户养了一条狗叫旺财")], ALICE, stated_at=T0
    )
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户养了一条狗叫大黄")], BOB, stated_at=T0
    )


async def test_sessions_list_counts_names_and_filters(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)

    sessions = await console.sessions()
    by_key = {s.session_key: s for s in sessions}
    assert set(by_key) == {str(ALICE), str(BOB), f"{GROUP}:{BOB}", f"{GROUP}:{ALICE}"}
    assert (by_key[str(ALICE)].turns, by_key[str(ALICE)].name, by_key[str(ALICE)].memories) == (
        3,
        "阿丽",
        1,
    )
    assert sessions[0].session_key == f"{GROUP}:{ALICE}"  # the latest activity first
    group_only = await console.sessions(group_id=GROUP)
    assert {s.session_key for s in group_only} == {f"{GROUP}:{BOB}", f"{GROUP}:{ALICE}"}
    private_alice = await console.sessions(chat_type="private", user_id=ALICE)
    assert [s.session_key for s in private_alice] == [str(ALICE)]


@pytest.mark.parametrize("by_meaning", [False, True])
async def test_search_in_one_session_never_shows_another_sessions_rows(memory_factory, by_meaning):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)

    found = await console.turns(str(ALICE), TurnSearch(text="骨头", by_meaning=by_meaning))

    assert found, "Alice's own turn about bones is found"
    assert {f.turn.session_key for f in found} == {str(ALICE)}
    assert any("旺财" in f.turn.content for f in found)
    if by_meaning:
        assert all(f.similarity is not None for f in found)
    else:
        assert [f.turn.content for f in found] == ["我家的狗叫旺财，很喜欢吃骨头"]
    memories = await console.memories(str(ALICE), "狗")
    assert [m.content for m in memories] == ["用户养了一条狗叫旺财"]


async def test_time_filter_keeps_only_turns_in_the_range(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)

    found = await console.turns(
        str(ALICE), TurnSearch(start=T0 + timedelta(minutes=1), end=T0 + timedelta(minutes=2))
    )

    assert [f.turn.content for f in found] == ["旺财真可爱"]


async def test_editing_a_turn_reembeds_it_and_writes_the_audit_log(
    memory_factory, hashing_embedder
):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn

    edited = await console.edit_turn(str(ALICE), turn.id, "后天我要去上海出差", actor=ACTOR)

    assert edited is not None and edited.content == "后天我要去上海出差"
    found = await console.turns(str(ALICE), TurnSearch(text="后天我要去上海出差", by_meaning=True))
    assert found[0].turn.id == turn.id
    assert found[0].similarity == pytest.approx(1.0, abs=0.01)  # the new text's own vector
    recalled = await memory.parts.retriever.recall(
        ALICE, "上海", options=RecallOptions(mode="keyword", now=T0 + timedelta(hours=1))
    )
    assert turn.id in recalled.anchor_ids  # the keywords were recomputed too
    log = await console.audit_log()
    assert (log[0].actor, log[0].action, log[0].target_kind, log[0].target_id) == (
        ACTOR,
        "edit",
        "turn",
        turn.id,
    )
    assert (log[0].before_text, log[0].after_text) == ("明天我要去北京出差", "后天我要去上海出差")


async def test_an_edited_turn_is_searched_by_its_speaker_when_the_speaker_index_is_on(
    memory_factory,
):
    memory = await memory_factory(memory_index_speaker=True)
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn

    await console.edit_turn(str(ALICE), turn.id, "后天我要去上海出差", actor=ACTOR)

    # The speaker's name is a keyword of the edited turn, as of any turn stored in this form.
    recalled = await memory.parts.retriever.recall(
        ALICE, "阿丽", options=RecallOptions(mode="keyword", now=T0 + timedelta(hours=1))
    )
    assert turn.id in recalled.anchor_ids
    async with memory.parts.database.pool.acquire() as conn:
        form = await conn.fetchval("SELECT text_form FROM dialogues WHERE id = $1", turn.id)
    assert form == memory.parts.writer.text_form == 1


async def test_an_edit_through_another_session_changes_nothing(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    alice_turn = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn
    alice_fact = (await console.memories(str(ALICE)))[0]

    assert await console.edit_turn(str(BOB), alice_turn.id, "改掉", actor=ACTOR) is None
    assert await console.edit_memory(str(BOB), alice_fact.id, "改掉", actor=ACTOR) is None
    assert await console.delete("turn", str(BOB), alice_turn.id, actor=ACTOR) is None
    assert (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn == alice_turn
    assert await console.audit_log() == []


async def test_editing_a_fact_reembeds_it_so_recall_finds_the_new_text(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    fact = (await console.memories(str(ALICE)))[0]

    edited = await console.edit_memory(str(ALICE), fact.id, "用户养了一只猫叫咪咪", actor=ACTOR)

    assert edited is not None and edited.content == "用户养了一只猫叫咪咪"
    hits = await memory.parts.keeper.recall(ALICE, None, "用户养了一只猫叫咪咪", kinds=("facts",))
    assert hits[0].memory.id == fact.id and hits[0].similarity > 0.99
    log = await console.audit_log()
    assert (log[0].before_text, log[0].after_text) == (
        "用户养了一条狗叫旺财",
        "用户养了一只猫叫咪咪",
    )
    with pytest.raises(InvalidTurnError):
        await console.edit_memory(str(ALICE), fact.id, "   ", actor=ACTOR)


async def test_delete_goes_to_the_bin_and_restore_brings_back_the_same_row(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch(text="旺财真可爱")))[0].turn
    fact = (await console.memories(str(ALICE)))[0]

    turn_bin = await console.delete("turn", str(ALICE), turn.id, actor=ACTOR)
    fact_bin = await console.delete("distilled", str(ALICE), fact.id, actor=ACTOR)

    assert turn_bin is not None and fact_bin is not None
    assert not await console.turns(str(ALICE), TurnSearch(text="旺财真可爱"))
    assert await console.memories(str(ALICE)) == []
    binned = await console.recycle_bin(str(ALICE))
    assert {(b.kind, b.item_id) for b in binned} == {("turn", turn.id), ("distilled", fact.id)}
    assert await console.recycle_bin(str(BOB)) == []

    await console.restore(turn_bin, actor=ACTOR)
    await console.restore(fact_bin, actor=ACTOR)

    restored = (await console.turns(str(ALICE), TurnSearch(text="旺财真可爱")))[0]
    assert restored.turn == turn
    by_meaning = await console.turns(str(ALICE), TurnSearch(text="旺财真可爱", by_meaning=True))
    assert by_meaning[0].similarity == pytest.approx(1.0, abs=0.01)  # its vector came back
    assert [m.id for m in await console.memories(str(ALICE))] == [fact.id]
    assert await console.recycle_bin() == []
    actions = [e.action for e in await console.audit_log()]
    assert actions == ["restore", "restore", "delete", "delete"]


async def test_deleting_a_fact_takes_the_turns_it_came_from_and_the_replies_into_the_bin(
    memory_factory,
):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    said = (await console.turns(str(ALICE), TurnSearch(text="很喜欢吃骨头")))[0].turn
    await memory.parts.keeper.save(
        [ExtractedMemory("facts", "用户的狗喜欢吃骨头", source_turn_ids=(said.id,))],
        ALICE,
        source_turn_ids=[said.id],
        stated_at=T0,
    )
    fact = next(m for m in await console.memories(str(ALICE)) if "骨头" in m.content)

    fact_bin = await console.delete("distilled", str(ALICE), fact.id, actor=ACTOR)

    assert fact_bin is not None
    left = [f.turn.content for f in await console.turns(str(ALICE), TurnSearch())]
    assert left == ["明天我要去北京出差"]  # the turn and the bot's reply to it went
    binned = {(b.kind, b.summary) for b in await console.recycle_bin(str(ALICE))}
    assert binned == {
        ("distilled", "用户的狗喜欢吃骨头"),
        ("turn", "我家的狗叫旺财，很喜欢吃骨头"),
        ("turn", "旺财真可爱"),
    }
    assert [m.content for m in await console.memories(str(ALICE))] == ["用户养了一条狗叫旺财"]
    # Each comes back on its own.
    [turn_bin] = [b.id for b in await console.recycle_bin(str(ALICE)) if b.summary == "旺财真可爱"]
    await console.restore(turn_bin, actor=ACTOR)
    left = [f.turn.content for f in await console.turns(str(ALICE), TurnSearch())]
    assert left == ["明天我要去北京出差", "旺财真可爱"]


async def test_deleting_a_turn_takes_the_memories_drawn_from_it_into_the_bin(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    said = (await console.turns(str(ALICE), TurnSearch(text="北京出差")))[0].turn
    await memory.parts.keeper.save(
        [ExtractedMemory("facts", "用户明天去北京出差", source_turn_ids=(said.id,))],
        ALICE,
        source_turn_ids=[said.id],
        stated_at=T0,
    )

    assert await console.delete("turn", str(ALICE), said.id, actor=ACTOR) is not None

    assert [m.content for m in await console.memories(str(ALICE))] == ["用户养了一条狗叫旺财"]
    binned = {(b.kind, b.summary) for b in await console.recycle_bin(str(ALICE))}
    assert binned == {("turn", "明天我要去北京出差"), ("distilled", "用户明天去北京出差")}


async def test_restore_refuses_a_fact_stored_again_meanwhile(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    fact = (await console.memories(str(ALICE)))[0]
    bin_id = await console.delete("distilled", str(ALICE), fact.id, actor=ACTOR)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content=fact.content)], ALICE, stated_at=T0
    )

    with pytest.raises(ConsoleConflictError):
        await console.restore(bin_id, actor=ACTOR)

    assert [b.id for b in await console.recycle_bin()] == [bin_id]  # still there


async def test_the_daily_purge_empties_the_bin_after_the_kept_days(memory_factory):
    memory = await memory_factory(memory_recycle_days=2)
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch()))[0].turn
    await console.delete("turn", str(ALICE), turn.id, actor=ACTOR, now=T0)

    await memory.purge_expired(now=T0 + timedelta(days=1))
    assert len(await console.recycle_bin()) == 1
    await memory.purge_expired(now=T0 + timedelta(days=2, minutes=1))
    assert await console.recycle_bin() == []


async def test_forgetting_a_person_empties_their_bin_rows_too(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    for key in (str(ALICE), str(BOB)):
        turn = (await console.turns(key, TurnSearch()))[0].turn
        await console.delete("turn", key, turn.id, actor=ACTOR)

    await memory.parts.forgetting.forget(ForgetScope(user_id=ALICE))

    assert [b.session_key for b in await console.recycle_bin()] == [str(BOB)]


async def test_debugger_shows_candidates_with_scores_and_the_prompt(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    now = T0 + timedelta(days=1)

    trace = await trace_recall(
        memory.parts, user_id=ALICE, group_id=None, message="我的狗叫什么", now=now, bot_name="小诗"
    )

    assert trace.candidates and trace.candidates[0].turn is not None
    assert {c.turn.session_key for c in trace.candidates if c.turn} == {str(ALICE)}
    top = trace.candidates[0]
    assert "旺财" in top.turn.content and top.fate == "进入提示词"
    assert top.similarity > 0 and top.decay == 1.0 and "狗叫" in top.keyword_hits
    system = trace.messages[-1]["content"]  # the memory comes with the message
    assert "用户养了一条狗叫旺财" in system and "我家的狗叫旺财" in system
    assert trace.messages[-1]["content"].endswith("我的狗叫什么")
    fact = (await MemoryConsole.from_parts(memory.parts).memories(str(ALICE)))[0]
    assert fact.access_count == 0  # a look at the prompt is not a use


async def test_debugger_marks_candidates_cut_by_the_token_budget(memory_factory):
    memory = await memory_factory(memory_max_tokens=60, memory_distilled_enabled=False)
    await _seed(memory)

    trace = await trace_recall(
        memory.parts,
        user_id=ALICE,
        group_id=None,
        message="狗 骨头 北京",
        now=T0 + timedelta(days=1),
    )

    fates = [c.fate for c in trace.candidates]
    assert "超出记忆的词元预算，被裁掉" in fates
    assert trace.context.tokens <= 60


def test_settings_view_masks_secrets_and_shows_the_rest():
    settings = MemorySettings(llm_api_key=SecretStr("sk-very-secret"), memory_top_n=4)

    shown = dict(masked_settings(settings, {"memory_console_token": "hunter2hunter2"}))

    assert shown["LLM_API_KEY"] == MASK and shown["MEMORY_CONSOLE_TOKEN"] == MASK
    assert shown["MEMORY_TOP_N"] == "4"
    assert shown["MEMORY_MAX_TOKENS"] == str(settings.memory_max_tokens)  # a count, no secret
    assert "sk-very-secret" not in repr(shown) and "hunter2" not in repr(shown)


async def test_an_edit_into_the_text_of_another_current_fact_is_refused_and_changes_nothing(
    memory_factory,
):
    memory = await memory_factory()
    await _seed(memory)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户住在杭州")], ALICE, stated_at=T0
    )
    console = MemoryConsole.from_parts(memory.parts)
    facts = {m.content: m for m in await console.memories(str(ALICE))}

    with pytest.raises(ConsoleConflictError):
        await console.edit_memory(
            str(ALICE), facts["用户住在杭州"].id, "用户养了一条狗叫旺财", actor=ACTOR
        )

    assert {m.content for m in await console.memories(str(ALICE))} == set(facts)
    assert await console.audit_log() == []


async def test_a_pinned_turn_keeps_no_expiry_through_evaluation_and_survives_the_purge(
    memory_factory,
):
    from memory_core.dialogue.source_store import PgSourceStore
    from memory_core.dialogue.upkeep_store import PgUpkeepStore

    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    user, bot = sorted((await console.turns(str(ALICE), TurnSearch())), key=lambda f: f.turn.id)[:2]
    assert await console.pin("turn", str(ALICE), user.turn.id, pinned=True, actor=ACTOR)

    soon = T0 + timedelta(hours=1)
    sources = memory.parts.database.store(PgSourceStore)
    await sources.set_score((user.turn.id, bot.turn.id), 5, soon)  # what the evaluator writes
    await memory.parts.database.store(PgUpkeepStore).purge_expired(T0 + timedelta(days=1), 100)

    left = {f.turn.id: f for f in await console.turns(str(ALICE), TurnSearch())}
    assert left[user.turn.id].pinned and left[user.turn.id].turn.expires_at is None
    assert left[user.turn.id].turn.score == 5  # scored, yet kept
    assert bot.turn.id not in left  # its unpinned reply expired and was purged
    log = await console.audit_log()
    assert (log[0].action, log[0].target_id) == ("pin", user.turn.id)


async def test_unpinning_a_scored_turn_gives_it_its_bands_expiry_again(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn
    await console.pin("turn", str(ALICE), turn.id, pinned=True, actor=ACTOR)
    await console.pin("turn", str(ALICE), turn.id, pinned=False, actor=ACTOR)
    again = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0]
    assert not again.pinned
    assert again.turn.expires_at is None  # never scored: no band, no expiry yet
    assert not await console.pin("turn", str(BOB), turn.id, pinned=True, actor=ACTOR)


async def refuse_audit_entries(memory) -> None:
    """A real trigger on the real database: every insert into the audit log fails."""
    async with memory.parts.database.pool.acquire() as conn:  # test-only: break the audit log
        await conn.execute(
            """
            CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'audit log refused'; END $$;
            CREATE TRIGGER refuse_audit BEFORE INSERT ON memory_audit_log
            FOR EACH ROW EXECUTE FUNCTION refuse_audit();
            """
        )


@pytest.mark.parametrize("kind", ["turn", "distilled"])
async def test_a_pin_whose_audit_entry_fails_is_rolled_back(memory_factory, kind):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn
    fact = (await console.memories(str(ALICE)))[0]
    item_id = turn.id if kind == "turn" else fact.id
    await refuse_audit_entries(memory)

    with pytest.raises(StorageError, match="audit log refused"):
        await console.pin(kind, str(ALICE), item_id, pinned=True, actor=ACTOR)

    shown_turns = {f.turn.id: f.pinned for f in await console.turns(str(ALICE), TurnSearch())}
    shown_memories = dict((m.id, pinned) for m, pinned in await console.shown_memories(str(ALICE)))
    assert shown_turns[turn.id] is False
    assert shown_memories[fact.id] is False


async def test_an_edit_or_delete_whose_audit_entry_fails_changes_nothing(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    turn = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn
    fact = (await console.memories(str(ALICE)))[0]
    await refuse_audit_entries(memory)

    with pytest.raises(StorageError, match="audit log refused"):
        await console.edit_turn(str(ALICE), turn.id, "改过的话", actor=ACTOR)
    with pytest.raises(StorageError, match="audit log refused"):
        await console.edit_memory(str(ALICE), fact.id, "改过的事实", actor=ACTOR)
    with pytest.raises(StorageError, match="audit log refused"):
        await console.delete("turn", str(ALICE), turn.id, actor=ACTOR)

    again = (await console.turns(str(ALICE), TurnSearch(text="北京")))[0].turn
    assert (again.id, again.content) == (turn.id, turn.content)
    assert [m.content for m in await console.memories(str(ALICE))] == [fact.content]
    assert await console.recycle_bin() == []


async def test_a_pinned_memory_is_never_merged_away_as_a_duplicate(memory_factory):
    from memory_core.distill.store import PgDistilledStore

    memory = await memory_factory()
    await _seed(memory)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户住在杭州")], ALICE, stated_at=T0
    )
    console = MemoryConsole.from_parts(memory.parts)
    newer = max(m.id for m in await console.memories(str(ALICE)))
    store = memory.parts.database.store(PgDistilledStore)
    # Any pair counts as a duplicate at a threshold of -1 (the lowest cosine).
    assert any(drop == newer for _, drop, _, _ in await store.duplicate_pairs(
        memory.parts.embedder.model, -1.0))  # fmt: skip
    assert await console.pin("distilled", str(ALICE), newer, pinned=True, actor=ACTOR)
    pairs = await store.duplicate_pairs(memory.parts.embedder.model, -1.0)
    assert all(drop != newer for _, drop, _, _ in pairs)
    shown = dict((m.id, pinned) for m, pinned in await console.shown_memories(str(ALICE)))
    assert shown[newer] is True


async def test_a_selection_goes_to_the_bin_item_by_item_and_only_from_its_session(
    memory_factory,
):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    alice = [f.turn.id for f in await console.turns(str(ALICE), TurnSearch())]
    bob = [f.turn.id for f in await console.turns(str(BOB), TurnSearch())]
    fact = (await console.memories(str(ALICE)))[0].id

    selection = [("turn", alice[0]), ("turn", alice[1]), ("distilled", fact), ("turn", bob[0])]
    moved = await console.delete_many(str(ALICE), selection, actor=ACTOR)

    assert moved == 3  # Bob's turn, named through Alice's session, stays
    assert [f.turn.id for f in await console.turns(str(BOB), TurnSearch())] == bob
    binned = await console.recycle_bin(str(ALICE))
    assert len(binned) == 3
    await console.restore(binned[0].id, actor=ACTOR)
    assert len(await console.recycle_bin(str(ALICE))) == 2


async def test_a_session_holding_only_distilled_memories_is_listed(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    for found in await console.turns(str(BOB), TurnSearch()):
        await console.delete("turn", str(BOB), found.turn.id, actor=ACTOR)

    # Newer turns elsewhere: Bob's session is not the most recently active one.
    await store_chat(
        memory, [(ALICE, None, "user", "今天天气不错", "阿丽")], T0 + timedelta(days=10)
    )
    listed = {s.session_key: s for s in await console.sessions()}
    assert (listed[str(BOB)].turns, listed[str(BOB)].memories) == (0, 1)
    assert (await console.sessions())[0].session_key == str(ALICE)
    shown = await console.session(str(BOB))
    assert shown is not None and (shown.session_key, shown.turns) == (str(BOB), 0)
    assert await console.session("424242") is None


async def test_session_counts_follow_inserts_and_deletes(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    newest = (await console.turns(str(ALICE), TurnSearch()))[0].turn
    await console.delete("turn", str(ALICE), newest.id, actor=ACTOR)
    row = await console.session(str(ALICE))
    assert row is not None and row.turns == 2
    assert row.last_at == (await console.turns(str(ALICE), TurnSearch()))[0].turn.created_at
    binned = (await console.recycle_bin(str(ALICE)))[0]
    await console.restore(binned.id, actor=ACTOR)
    row = await console.session(str(ALICE))
    assert row is not None and (row.turns, row.last_at) == (3, newest.created_at)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("狗叫旺", 1), ("ＷＡＮＧ", 1), ("g", 1), ("骨头形状", 0), ("喜", 1)],
)
async def test_keyword_search_finds_every_turn_containing_the_text(memory_factory, text, expected):
    memory = await memory_factory()
    await store_chat(
        memory, [(ALICE, None, "user", "我家的狗叫旺财 wang，很喜欢吃骨头", "阿丽")], T0
    )
    async with (
        memory.parts.database.pool.acquire() as conn
    ):  # a turn not analysed yet is searched too
        await conn.execute("UPDATE dialogues SET keywords = NULL")
    await store_chat(memory, [(ALICE, None, "user", "旺财又叫狗叫旺旺", "阿丽")], T0)
    console = MemoryConsole.from_parts(memory.parts)
    found = await console.turns(str(ALICE), TurnSearch(text=text))
    assert sum("骨头" in f.turn.content for f in found) == expected


async def test_each_reply_counts_how_long_reading_memory_took_for_the_latency_chart(
    memory_factory,
):
    from memory_core.conversation.engine import (
        RECALL_BANDS,
        RECALL_MS_TOTAL,
        RECALL_REPLIES,
        RECALL_SLOW,
        ConversationEngine,
    )
    from tests.core.conversation.test_chat import Outbox, user_turn
    from tests.fakes import RecordingModel

    memory = await memory_factory()
    engine = ConversationEngine(
        parts=memory.parts, chat_model=RecordingModel("好的"), bot_name="小诗"
    )
    now = datetime.now(timezone.utc)
    for i, text in enumerate(("我叫小明", "我叫什么")):
        await engine.converse(user_turn(text, message_id=i + 1, at=now), Outbox())

    figures = await MemoryConsole.from_parts(memory.parts).daily_figures(days=2, now=now)
    today = {name: values[-1] for name, values in figures.metrics.items()}
    assert today[RECALL_REPLIES] == 2
    assert today[RECALL_MS_TOTAL] >= 0
    bands = [name for _, name in RECALL_BANDS] + [RECALL_SLOW]
    assert sum(today.get(name, 0) for name in bands) == 2


async def test_a_group_switch_whose_audit_entry_fails_is_rolled_back(memory_factory):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    before = await console.group_switches()
    assert [(g.group_id, g.memory_on, g.shared) for g in before] == [(GROUP, True, False)]
    await refuse_audit_entries(memory)

    with pytest.raises(StorageError, match="audit log refused"):
        await console.switch_group(GROUP, on=False, actor=ACTOR)
    with pytest.raises(StorageError, match="audit log refused"):
        await console.switch_group_sharing(GROUP, on=True, actor=ACTOR)

    assert await console.group_switches() == before
    assert not await memory.parts.sharing.shared(GROUP)  # nothing kept from the rolled-back switch


def test_daily_figures_fitted_start_at_the_first_day_with_data_and_keep_a_week():
    from datetime import date

    from memory_core.console import DailyFigures

    days = tuple(date(2026, 11, 1) + timedelta(days=i) for i in range(30))
    zeros = (0,) * 30
    late = DailyFigures(days, (*zeros[:27], 2, 0, 1), zeros, {"purged": zeros})
    fitted = late.fitted()
    assert fitted.days[0] == date(2026, 11, 24) and len(fitted.days) == 7  # a week at least
    assert fitted.today_turns == 1 and fitted.user_turns[-3:] == (2, 0, 1)

    early = DailyFigures(days, zeros, zeros, {"purged": (*zeros[:10], 5, *zeros[11:])})
    assert early.fitted().days[0] == date(2026, 11, 11)  # a metric counts as data too
    assert len(early.fitted().metrics["purged"]) == 20
    assert DailyFigures(days, zeros, zeros, {}).fitted().days == days[-7:]


async def test_headline_counts_todays_turns_sessions_memories_and_turns_without_a_vector(
    memory_factory, hashing_embedder
):
    memory = await memory_factory()
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)
    hashing_embedder.fail = True  # the embedder is down: the next turn is stored without one
    await memory.parts.writer.add_turn(
        TurnInput(user_id=3003, role="user", content="向量服务挂了", created_at=T0)
    )

    figures = await console.daily_figures(now=T0 + timedelta(hours=1))
    headline = await console.headline(figures)

    assert headline.today_turns == 7  # the six seeded and the one without a vector, all on T0
    assert headline.sessions == 5  # Alice, Bob, both in the group, and 3003
    assert headline.memories == {"facts": 2}
    assert headline.pending_embeddings == 1 and headline.extraction_failed_today == 0


async def test_meaning_search_keeps_only_turns_at_or_above_the_floor_and_counts_them(
    memory_factory,
):
    memory = await memory_factory(memory_recall_floor=0.99)
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)

    found = await console.search_turns(str(ALICE), TurnSearch(text="旺财真可爱", by_meaning=True))

    assert [f.turn.content for f in found.items] == ["旺财真可爱"]  # its own text, ~1.0
    assert (found.total, found.floor, found.capped) == (1, 0.99, False)


async def test_meaning_search_of_a_model_without_a_floor_shows_every_turn_and_says_so(
    memory_factory,
):
    memory = await memory_factory()  # the test model is named in no floor table
    await _seed(memory)
    console = MemoryConsole.from_parts(memory.parts)

    found = await console.search_turns(str(ALICE), TurnSearch(text="旺财真可爱", by_meaning=True))

    assert (len(found.items), found.total, found.floor) == (3, 3, None)
    keyword = await console.search_turns(str(ALICE), TurnSearch(text="旺财"))
    assert keyword.total == 2 and keyword.floor is None


async def test_sessions_listed_by_key_are_named_by_the_client_else_by_their_stored_name(
    memory_factory,
):
    from memory_core.console import ChatNames

    memory = await memory_factory()
    await _seed(memory)

    async def client(user_id: int, group_id: int | None) -> ChatNames:
        return ChatNames(group="狗友群") if group_id == GROUP else ChatNames()

    keys = [str(ALICE), f"{GROUP}:{BOB}", "not a chat", f"{GROUP}:{BOB}"]
    named = await MemoryConsole.from_parts(memory.parts, names=client).chat_names(keys)
    assert named == {
        str(ALICE): ChatNames(person="阿丽"),
        f"{GROUP}:{BOB}": ChatNames(person="波波", group="狗友群"),
    }
    unasked = await MemoryConsole.from_parts(memory.parts).chat_names([f"{GROUP}:{ALICE}"])
    assert unasked == {f"{GROUP}:{ALICE}": ChatNames(person="丽丽")}
