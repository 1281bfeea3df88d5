"""How the engine asks the chat model for one reply: with the memory tools when the model
offers them (``conversation.tools``), within the group's daily token budget
(``conversation.budget``), inside the reply deadline.

This is the engine's one seam to the model: ``ConversationEngine`` asks ``ModelAsking`` how big
the memory block may be, whether the group is resting, and for the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..providers.llm import ChatModel, ToolChatModel
from ..settings import MemorySettings
from .budget import TIGHT_MEMORY_SHARE, BudgetState, GroupBudget
from .tools import ChatScope, MemoryTools, ToolAnswer, answer_with_tools

# With the tools offered the model can search for more itself: the injected block is smaller
# (still there, for models that do not call tools).
TOOLS_MEMORY_SHARE = 0.5


class ModelAsking:
    """Asks ``model`` for replies; ``tools`` ``None``: never offered."""

    def __init__(
        self,
        model: ChatModel,
        settings: MemorySettings,
        budget: GroupBudget,
        tools: MemoryTools | None,
    ) -> None:
        self._model = model
        self._settings = settings
        self.budget = budget
        self._tools = tools

    @property
    def tools_offered(self) -> bool:
        """Whether the next reply offers the memory tools."""
        model = self._model
        return self._tools is not None and isinstance(model, ToolChatModel) and model.offers_tools

    def state(self, group_id: int | None, now: datetime) -> BudgetState:
        return self.budget.state(group_id, now)

    def memory_tokens_for(self, group_id: int | None, now: datetime) -> int | None:
        """The memory block's budget for a message of ``group_id`` at ``now`` (the prompt
        preparer asks, for the bot and the console's debugger alike)."""
        return self.memory_tokens(self.state(group_id, now))

    def memory_tokens(self, state: BudgetState) -> int | None:
        """The memory block's budget for a reply in ``state`` (``None``: MEMORY_MAX_TOKENS)."""
        full = self._settings.memory_max_tokens
        if state is not BudgetState.OPEN:
            return int(full * TIGHT_MEMORY_SHARE)
        if self.tools_offered:
            return int(full * TOOLS_MEMORY_SHARE)
        return None

    async def ask(
        self, messages: Sequence[Mapping[str, Any]], scope: ChatScope, state: BudgetState
    ) -> ToolAnswer:
        """The reply (no tools for a group near its budget); its tokens are counted to the
        group. ``LLMError`` or ``asyncio.TimeoutError`` (LLM_REPLY_DEADLINE, the whole
        exchange with its tool rounds) when there is none."""
        model = self._model
        if not isinstance(model, ToolChatModel):  # a bare ChatModel: text only, no usage
            text = await model.complete([{str(k): str(v) for k, v in m.items()} for m in messages])
            return ToolAnswer(text, model_calls=1, tool_calls=0, tokens=0)
        tools = self._tools if state is BudgetState.OPEN else None
        answer = await asyncio.wait_for(
            answer_with_tools(model, messages, tools, scope), self._settings.llm_reply_deadline
        )
        self.budget.spend(scope.group_id, answer.tokens, scope.before)
        return answer
