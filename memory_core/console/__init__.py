"""The operator's web console, framework-free: sessions, the memory browser, edits, the recycle
bin, the audit log, daily figures and the recall debugger. The plugin serves it as pages."""

from .debugger import RecallTrace, trace_recall
from .service import (
    ChatNames,
    DailyFigures,
    GroupSwitches,
    MemoryConsole,
    NameLookup,
    TurnSearch,
)
from .settings_view import masked_settings
from .store import AuditEntry, BinItem, ConsoleConflictError, FoundTurn, SessionRow

__all__ = [
    "AuditEntry",
    "BinItem",
    "ChatNames",
    "ConsoleConflictError",
    "DailyFigures",
    "FoundTurn",
    "GroupSwitches",
    "MemoryConsole",
    "NameLookup",
    "RecallTrace",
    "SessionRow",
    "TurnSearch",
    "masked_settings",
    "trace_recall",
]
