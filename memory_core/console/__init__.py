"""The operator's web console, framework-free: sessions, the memory browser, edits, the recycle
bin, the audit log, daily figures and the recall debugger. The plugin serves it as pages."""

from ..storage.audit_log import AuditEntry
from ..storage.recycle_bin import BinItem
from .debugger import RecallTrace, trace_recall
from .service import (
    PAGE_SIZE,
    ChatNames,
    DailyFigures,
    GroupSwitches,
    Headline,
    MemoryConsole,
    NameLookup,
    TurnPage,
    TurnSearch,
    chat_of_key,
)
from .settings_view import SettingsSection, documented, masked_settings, settings_sections
from .store import ConsoleConflictError, FoundTurn, SessionRow

__all__ = [
    "PAGE_SIZE",
    "AuditEntry",
    "BinItem",
    "ChatNames",
    "ConsoleConflictError",
    "DailyFigures",
    "FoundTurn",
    "GroupSwitches",
    "Headline",
    "MemoryConsole",
    "NameLookup",
    "RecallTrace",
    "SessionRow",
    "SettingsSection",
    "TurnPage",
    "TurnSearch",
    "chat_of_key",
    "documented",
    "masked_settings",
    "settings_sections",
    "trace_recall",
]
