"""``count_forget`` names, before a /forget asks, exactly what ``forget`` then deletes."""

from __future__ import annotations

from datetime import datetime, timezone

from memory_core.distill.memory import ExtractedMemory
from memory_core.models import ForgetScope, Forgotten, TurnInput

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
GROUP_A, GROUP_B = 1001, 1002


async def seed(memory) -> None:
    """Two turns and a fact and a preference per session; a summary in one of them."""
    for user, group in ((1, GROUP_A), (1, GROUP_B), (1, None), (2, GROUP_A)):
        for n in range(2):
            await memory.parts.writer.add_turn(
                TurnInput(
                    user_id=user,
                    group_id=group,
                    role="user",
                    content=f"用户{user}在{group}说的第{n}句",
                    created_at=T0,
                )
            )
        await memory.parts.keeper.save(
            [
                ExtractedMemory(kind="facts", content=f"用户{user}在{group}养了猫"),
                ExtractedMemory(kind="preferences", content=f"用户{user}在{group}喜欢短回答"),
            ],
            user,
            group,
            stated_at=T0,
        )
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="summary", content="用户1在群里聊了猫")], 1, GROUP_A, stated_at=T0
    )


async def test_count_forget_of_each_scope_is_what_forget_deletes(memory_factory):
    memory = await memory_factory()
    await seed(memory)
    scopes = (
        {"user_id": 1, "group_id": GROUP_A},
        {"user_id": 1, "private_only": True},
        {"user_id": 1},
        {"group_id": GROUP_A},
        {"everything": True},
    )
    expected = (
        Forgotten(dialogues=2, facts=1, preferences=1, summaries=1),
        Forgotten(dialogues=2, facts=1, preferences=1),
        Forgotten(dialogues=2, facts=1, preferences=1),  # what the two before left of user 1
        Forgotten(dialogues=2, facts=1, preferences=1),  # user 2 is all group A has left
        Forgotten(),
    )
    assert await memory.parts.forgetting.count_forget(ForgetScope(user_id=1)) == Forgotten(
        dialogues=6, facts=3, preferences=3, summaries=1
    )
    for scope, figures in zip(scopes, expected, strict=True):
        counted = await memory.parts.forgetting.count_forget(ForgetScope(**scope))
        assert counted == figures, scope
        assert await memory.parts.forgetting.forget(ForgetScope(**scope)) == counted, scope
