"""The operator's web console, framework-free: sessions, the memory browser, edits, the recycle
bin, the audit log, daily figures and the recall debugger. The plugin serves it as pages.

What people read is presented from here too, not from the core's face: the ``/memstat``
dashboard (``dashboard``) and the Chinese labels, times and ranges the pages and commands show."""

from ..distill.memory import CATEGORY_ZH
from ..lang.timefmt import relative_time_zh
from ..pictures import DERIVED_LABEL
from ..storage.audit_log import AuditEntry
from ..storage.recycle_bin import BinItem
from ..time_bounds import RANGE_TEXT
from .dashboard import (
    Connection,
    DatabaseState,
    band_label,
    chat_calls_zh,
    connection_of,
    dashboard_zh,
    unavailable_dashboard_zh,
    uptime_zh,
)
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
    "CATEGORY_ZH",
    "DERIVED_LABEL",
    "PAGE_SIZE",
    "RANGE_TEXT",
    "AuditEntry",
    "BinItem",
    "ChatNames",
    "Connection",
    "ConsoleConflictError",
    "DailyFigures",
    "DatabaseState",
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
    "band_label",
    "chat_calls_zh",
    "chat_of_key",
    "connection_of",
    "dashboard_zh",
    "documented",
    "masked_settings",
    "relative_time_zh",
    "settings_sections",
    "trace_recall",
    "unavailable_dashboard_zh",
    "uptime_zh",
]
