"""Time expressions in queries (昨天, 上周三, 三天前, 1月16日, last week…) as ``[start, end)``.

Hand-written rather than ``dateparser``: measured on these expressions (dateparser 1.5.0),
dateparser returned nothing for 刚才, 三天前, 周末, 上周三 and 1月16日, found nothing inside a
sentence ("我昨天说了什么"), and returns one instant, not a range ("上个月" -> the 1st at the
current clock time). A query needs a range in the configured timezone, found anywhere in the
sentence; the rules below are small and each is tested.

Weeks start on Monday. Ranges are half-open ``[start, end)`` in the configured timezone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from ..time_bounds import time_problem
from .keywords import ENGLISH_STOPWORDS, QUERY_STOP_PHRASES, normalize, word_list

# "刚才" looks this far back; recall also prefers the very latest turns for it.
RECENT_SPAN = timedelta(hours=2)
# A turn is stored with the time it talks about only when that is this narrow: "下周" still
# says when; "今年", "去年" would make the turn match most questions about a day.
MAX_REFERENCE_SPAN = timedelta(days=7)
# Only a stored turn's opening is read for it (a pasted article must not cost the insert).
REFERENCE_SCAN_CHARS = 1000


@dataclass(frozen=True)
class TimeRange:
    """A half-open range ``[start, end)``; ``recent`` marks 刚才-like "just now" questions."""

    start: datetime
    end: datetime
    expression: str
    recent: bool = False

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@dataclass(frozen=True)
class TimeQuery:
    """A query's time range, the query without the expression, and whether that rest says
    nothing but "what happened" (then recall keeps only anchors inside the range)."""

    range: TimeRange
    rest: str
    time_only: bool


_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_EN_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
_WEEKDAYS_ZH = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6, "七": 6}
_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS_EN = (
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)
# Parts of a day that may follow a day expression (昨天晚上, yesterday morning).
_DAY_PARTS: tuple[tuple[str, int, int], ...] = (
    ("凌晨", 0, 6),
    ("早上", 5, 12),
    ("早晨", 5, 12),
    ("上午", 5, 12),
    ("中午", 11, 14),
    ("下午", 12, 18),
    ("傍晚", 17, 20),
    ("晚上", 18, 24),
    ("夜里", 18, 24),
    ("morning", 5, 12),
    ("noon", 11, 14),
    ("afternoon", 12, 18),
    ("evening", 18, 24),
    ("night", 18, 24),
)
_DAY_PART = re.compile(
    r"\s*的?\s*(" + "|".join(re.escape(name) for name, _, _ in _DAY_PARTS) + r")"
)

_NUM_ZH = r"(\d+|[零〇一二两三四五六七八九十]+|半)"
_NUM_EN = (
    r"(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few|few|several)"
)
_NOT_LETTER_BEFORE = r"(?<![a-z])"
_NOT_LETTER_AFTER = r"(?![a-z])"
_WD_ZH = r"([一二三四五六日天1-7])"
_WD_EN = "(" + "|".join(_WEEKDAYS_EN) + ")"
_MON_EN = r"(" + "|".join(m + r"[a-z]*" for m in _MONTHS_EN) + r")\.?"


def _number(text: str) -> float:
    text = text.strip()
    if text.isdigit():
        return float(int(text))
    if text == "半":
        return 0.5
    if text in _EN_NUMBERS:
        return float(_EN_NUMBERS[text])
    if "十" in text:
        tens, _, ones = text.partition("十")
        return float((_CN_DIGITS.get(tens, 1) if tens else 1) * 10 + _CN_DIGITS.get(ones, 0))
    value = 0
    for char in text:
        if char not in _CN_DIGITS:
            raise ValueError(text)
        value = value * 10 + _CN_DIGITS[char]
    return float(value)


def _groups(m: re.Match[str]) -> list[str]:
    """The groups that took part in the match (rules are alternations of patterns)."""
    return [g for g in m.groups() if g is not None]


def _weekday(text: str) -> int:
    if text.isdigit():
        return (int(text) - 1) % 7
    return _WEEKDAYS_ZH[text]


@dataclass(frozen=True)
class _Context:
    now: datetime  # aware, in the configured timezone
    tz: tzinfo

    @property
    def today(self) -> date:
        return self.now.date()

    def at(self, day: date, hour: int = 0) -> datetime:
        if hour >= 24:
            return datetime.combine(day + timedelta(days=1), time(0), tzinfo=self.tz)
        return datetime.combine(day, time(hour), tzinfo=self.tz)

    def day(self, day: date) -> _Span:
        return _Span(self.at(day), self.at(day + timedelta(days=1)), day=day)

    def days(self, first: date, after_last: date) -> _Span:
        return _Span(self.at(first), self.at(after_last))

    def week_start(self, weeks_back: int = 0) -> date:
        return self.today - timedelta(days=self.today.weekday() + 7 * weeks_back)

    def month(self, months_back: int, year: int | None = None, month: int | None = None) -> _Span:
        y, m = (year, month) if year and month else (self.today.year, self.today.month)
        index = y * 12 + (m - 1) - months_back
        first = date(index // 12, index % 12 + 1, 1)
        nxt = index + 1
        return self.days(first, date(nxt // 12, nxt % 12 + 1, 1))

    def year(self, year: int) -> _Span:
        return self.days(date(year, 1, 1), date(year + 1, 1, 1))

    def past_date(self, month: int, day: int) -> _Span:
        """``month/day`` in the current year, or last year's if it is still to come."""
        candidate = date(self.today.year, month, day)
        if candidate > self.today:
            candidate = date(self.today.year - 1, month, day)
        return self.day(candidate)

    def around(self, ago: timedelta, half: timedelta) -> _Span:
        centre = self.now - ago
        return _Span(centre - half, min(self.now + timedelta(seconds=1), centre + half))


@dataclass(frozen=True)
class _Span:
    start: datetime
    end: datetime
    day: date | None = None  # a single calendar day: a day part may narrow it
    recent: bool = False


_Handler = Callable[[re.Match[str], _Context], _Span]


def _recent(m: re.Match[str], c: _Context) -> _Span:
    return _Span(c.now - RECENT_SPAN, c.now + timedelta(seconds=1), recent=True)


def _minutes_ago(m: re.Match[str], c: _Context) -> _Span:
    minutes = _number(_groups(m)[0])
    return c.around(timedelta(minutes=minutes), timedelta(minutes=max(10.0, minutes / 2)))


def _hours_ago(m: re.Match[str], c: _Context) -> _Span:
    hours = _number(_groups(m)[0])
    return c.around(timedelta(hours=hours), timedelta(hours=max(1.0, hours / 4)))


def _days_back(n: int) -> _Handler:
    return lambda m, c: c.day(c.today - timedelta(days=n))


def _days_ahead(n: int) -> _Handler:
    return lambda m, c: c.day(c.today + timedelta(days=n))


def _days_later(m: re.Match[str], c: _Context) -> _Span:
    return c.day(c.today + timedelta(days=int(_number(_groups(m)[0]))))


def _days_ago(m: re.Match[str], c: _Context) -> _Span:
    return c.day(c.today - timedelta(days=int(_number(_groups(m)[0]))))


def _few_days_ago(m: re.Match[str], c: _Context) -> _Span:
    return c.days(c.today - timedelta(days=6), c.today)


def _last_n_days(m: re.Match[str], c: _Context) -> _Span:
    n = max(1, int(_number(_groups(m)[0])))
    return _Span(c.at(c.today - timedelta(days=n - 1)), c.now + timedelta(seconds=1))


def _week(weeks_back: int) -> _Handler:
    def handler(m: re.Match[str], c: _Context) -> _Span:
        start = c.week_start(weeks_back)
        weekday = next(iter(_groups(m)), None)
        if weekday:
            return c.day(start + timedelta(days=_weekday(weekday)))
        return c.days(start, start + timedelta(days=7))

    return handler


def _weeks_ago(m: re.Match[str], c: _Context) -> _Span:
    start = c.week_start(int(_number(_groups(m)[0])))
    return c.days(start, start + timedelta(days=7))


def _weekend(which: str) -> _Handler:
    def handler(m: re.Match[str], c: _Context) -> _Span:
        monday = c.week_start()
        if which == "this" or (which == "nearest" and c.today.weekday() >= 5):
            return c.days(monday + timedelta(days=5), monday + timedelta(days=7))
        return c.days(monday - timedelta(days=2), monday)

    return handler


def _weekday_alone(m: re.Match[str], c: _Context) -> _Span:
    wanted = _weekday(_groups(m)[0])
    return c.day(c.today - timedelta(days=(c.today.weekday() - wanted) % 7))


def _weekday_en(strictly_before: bool) -> _Handler:
    def handler(m: re.Match[str], c: _Context) -> _Span:
        back = (c.today.weekday() - _WEEKDAYS_EN.index(_groups(m)[0])) % 7
        if strictly_before and back == 0:
            back = 7
        return c.day(c.today - timedelta(days=back))

    return handler


def _weekday_next(m: re.Match[str], c: _Context) -> _Span:
    ahead = (_WEEKDAYS_EN.index(_groups(m)[0]) - c.today.weekday()) % 7
    return c.day(c.today + timedelta(days=ahead or 7))


def _months_back(n: int) -> _Handler:
    return lambda m, c: c.month(n)


def _months_ago(m: re.Match[str], c: _Context) -> _Span:
    return c.month(int(_number(_groups(m)[0])))


def _years_back(n: int) -> _Handler:
    return lambda m, c: c.year(c.today.year - n)


def _years_ago(m: re.Match[str], c: _Context) -> _Span:
    return c.year(c.today.year - int(_number(_groups(m)[0])))


def _full_date(m: re.Match[str], c: _Context) -> _Span:
    return c.day(date(int(_groups(m)[0]), int(_groups(m)[1]), int(_groups(m)[2])))


def _year_month(m: re.Match[str], c: _Context) -> _Span:
    return c.month(0, int(_groups(m)[0]), int(_groups(m)[1]))


def _year_only(m: re.Match[str], c: _Context) -> _Span:
    return c.year(int(_groups(m)[0]))


def _month_day(m: re.Match[str], c: _Context) -> _Span:
    return c.past_date(int(_number(_groups(m)[0])), int(_number(_groups(m)[1])))


def _month_alone(m: re.Match[str], c: _Context) -> _Span:
    month = int(_number(_groups(m)[0]))
    year = c.today.year if month <= c.today.month else c.today.year - 1
    return c.month(0, year, month)


def _month_name_day(m: re.Match[str], c: _Context) -> _Span:
    return c.past_date(_MONTHS_EN.index(_groups(m)[0][:3]) + 1, int(_groups(m)[1]))


def _day_month_name(m: re.Match[str], c: _Context) -> _Span:
    return c.past_date(_MONTHS_EN.index(_groups(m)[1][:3]) + 1, int(_groups(m)[0]))


def _en(pattern: str) -> str:
    return _NOT_LETTER_BEFORE + "(?:" + pattern + ")" + _NOT_LETTER_AFTER


# (pattern, handler), tried on NFKC-lower-cased text; the earliest, then longest, match wins.
_RULES: list[tuple[re.Pattern[str], _Handler]] = [
    (re.compile(p), h)
    for p, h in [
        (r"刚才|刚刚|方才|" + _en(r"just now|a (?:moment|minute|few minutes) ago"), _recent),
        (_NUM_ZH + r"\s*分钟(?:之|以)?前|" + _en(_NUM_EN + r" minutes? ago"), _minutes_ago),
        (
            _NUM_ZH + r"\s*个?(?:半)?(?:小时|钟头)(?:之|以)?前|" + _en(_NUM_EN + r" hours? ago"),
            _hours_ago,
        ),
        (r"大前天", _days_back(3)),
        (r"前天|" + _en(r"(?:the )?day before yesterday"), _days_back(2)),
        (r"昨天|昨日|昨晚|昨夜|" + _en(r"yesterday|last night"), _days_back(1)),
        (r"今天|今日|今早|今晚|" + _en(r"today|this morning|tonight|this evening"), _days_back(0)),
        (r"几天(?:之|以)?前|前几天|" + _en(r"a few days ago"), _few_days_ago),
        (
            r"(?:最近|过去|近|这)" + _NUM_ZH + r"\s*天|" + _en(r"(?:last|past) (\d+) days"),
            _last_n_days,
        ),
        (r"(?<![一两二三四五六七八九十几\d])" + _NUM_ZH + r"\s*[天日](?:之|以)?前", _days_ago),
        (_en(_NUM_EN + r" days? ago"), _days_ago),
        (r"上上(?:个)?(?:周|星期|礼拜)" + _WD_ZH + "?", _week(2)),
        (r"(?<![晚早马路])上(?:个)?周(?!末)" + _WD_ZH + "?", _week(1)),
        (r"上(?:个)?(?:星期|礼拜)" + _WD_ZH + "?", _week(1)),
        (_en(r"last week|the week before"), _week(1)),
        (r"(?:这|本)(?:个)?(?:周|星期|礼拜)(?!末)" + _WD_ZH + "?", _week(0)),
        (_en(r"this week"), _week(0)),
        (
            _NUM_ZH + r"\s*个?(?:周|星期|礼拜)(?:之|以)?前|" + _en(_NUM_EN + r" weeks? ago"),
            _weeks_ago,
        ),
        (r"上(?:个)?周末|" + _en(r"last weekend"), _weekend("last")),
        (r"(?:这|本)(?:个)?周末|" + _en(r"this weekend"), _weekend("this")),
        (r"周末|" + _en(r"(?:the |on the )?weekend"), _weekend("nearest")),
        (r"(?<![一两二三四五六七八九十每几\d])(?:周|星期|礼拜)" + _WD_ZH, _weekday_alone),
        (_en(r"last " + _WD_EN), _weekday_en(strictly_before=True)),
        (_en(r"(?:on )?" + _WD_EN), _weekday_en(strictly_before=False)),
        (r"上上(?:个)?月", _months_back(2)),
        (r"(?<![晚早马路身手桌楼山])上(?:个)?月(?!份?\d)|" + _en(r"last month"), _months_back(1)),
        (r"(?:这|本)(?:个)?月|" + _en(r"this month"), _months_back(0)),
        (_NUM_ZH + r"\s*个月(?:之|以)?前|" + _en(_NUM_EN + r" months? ago"), _months_ago),
        (r"前年|" + _en(r"the year before last"), _years_back(2)),
        (r"去年|" + _en(r"last year"), _years_back(1)),
        (r"今年|" + _en(r"this year"), _years_back(0)),
        (_NUM_ZH + r"\s*年(?:之|以)?前|" + _en(_NUM_EN + r" years? ago"), _years_ago),
        (r"(?<!\d)(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})(?!\d)[日号]?", _full_date),
        (r"(?<!\d)(\d{4})\s*年\s*(\d{1,2})\s*月(?:份)?", _year_month),
        (r"(?<!\d)(\d{4})\s*年(?!前|之前|以前)", _year_only),
        (
            r"(?<![\d.])(\d{1,2}|[一二三四五六七八九十]+)\s*月\s*(\d{1,2}|[一二三四五六七八九十]+)"
            r"\s*[日号]",
            _month_day,
        ),
        (r"(?<![\d/.])(\d{1,2})/(\d{1,2})(?![/\d])", _month_day),
        (
            r"(?<![\d个])(\d{1,2}|十[一二]?|[一二三四五六七八九])\s*月份?"
            r"(?![\d一二三四五六七八九十]|[日号])",
            _month_alone,
        ),
        (_en(_MON_EN + r" (\d{1,2})(?:st|nd|rd|th)?"), _month_name_day),
        (_en(r"(\d{1,2})(?:st|nd|rd|th)? (?:of )?" + _MON_EN), _day_month_name),
    ]
]

# Plans ("我明天上午十点要去体检"): read in stored turns only, for the time they talk about
# (``referred_range``). Not in queries: a question about the future finds its plans through
# the days they were made for, and a conversation pasted as a query ("明天见") would otherwise
# steer recall to a day nothing was said on (measured on MADial-Bench, bench/RESULTS.md).
_PLAN_RULES: list[tuple[re.Pattern[str], _Handler]] = [
    (re.compile(p), h)
    for p, h in [
        (r"大后天", _days_ahead(3)),
        (r"后天|" + _en(r"(?:the )?day after tomorrow"), _days_ahead(2)),
        (r"明天|明日|明早|明晚|" + _en(r"tomorrow"), _days_ahead(1)),
        (r"(?<![一两二三四五六七八九十几\d])" + _NUM_ZH + r"\s*天(?:之|以)?后", _days_later),
        (_en(r"in " + _NUM_EN + r" days?"), _days_later),
        (r"(?<!一)下(?:个)?(?:周|星期|礼拜)(?!末)" + _WD_ZH + "?", _week(-1)),
        (_en(r"next week"), _week(-1)),
        (_en(r"next " + _WD_EN), _weekday_next),
    ]
]

# What a "what happened then" question says besides its time expression.
_FILLER_WORDS = word_list(
    "讨论 发生 发生了 干了 干嘛 做了 在干 聊天 说话 事情 事 话题 内容 东西 时候",
    "都 有 些 了 的 说 聊 讲 做 干 在 是 跟 和 对 给 我 你 他 她 它 们 过 哪 么",
)
_TIME_ONLY_FILLER = re.compile(
    "|".join(
        re.escape(p) for p in sorted([*QUERY_STOP_PHRASES, *_FILLER_WORDS], key=len, reverse=True)
    )
)
_EN_FILLER = ENGLISH_STOPWORDS | {
    "talk",
    "talked",
    "say",
    "said",
    "tell",
    "told",
    "discuss",
    "discussed",
    "happen",
    "happened",
    "chat",
    "chatted",
    "mention",
    "mentioned",
    "remember",
    "anything",
    "something",
    "things",
}


def parse_time_range(text: str, now: datetime, tz: tzinfo) -> TimeRange | None:
    """The first time expression of ``text`` as a range relative to ``now`` in ``tz``."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    found = _find(normalize(text), _Context(now.astimezone(tz), tz))
    return found[0] if found else None


def _find(
    text: str, context: _Context, rules: list[tuple[re.Pattern[str], _Handler]] = _RULES
) -> tuple[TimeRange, int, int] | None:
    best: tuple[int, int, re.Match[str], _Handler] | None = None
    for pattern, handler in rules:
        match = pattern.search(text)
        if match is None:
            continue
        key = (match.start(), -(match.end() - match.start()))
        if best is None or key < (best[0], best[1]):
            best = (key[0], key[1], match, handler)
    if best is None:
        return None
    match, handler = best[2], best[3]
    try:
        span = handler(match, context)
    except (ValueError, KeyError, OverflowError):  # 2月30日, 13/45: not a date after all
        return None
    end_at = match.end()
    if span.day is not None:
        part = _DAY_PART.match(text, end_at)
        if part is not None:
            name = part.group(1)
            first, last = next((a, b) for n, a, b in _DAY_PARTS if n == name)
            span = _Span(context.at(span.day, first), context.at(span.day, last))
            end_at = part.end()
    expression = text[match.start() : end_at]
    found = TimeRange(span.start, span.end, expression.strip(), recent=span.recent)
    return found, match.start(), end_at


def referred_range(text: str, said_at: datetime, tz: tzinfo) -> TimeRange | None:
    """The time a stored turn talks about ("我明天上午十点要去体检" said on Monday: Tuesday
    morning), from its first time expression, relative to when it was said; ``None`` when it
    names no time, or only "just now", or a span wider than ``MAX_REFERENCE_SPAN``, or one
    outside the range the database keeps (``time_bounds``: "3000年1月1日" filters no question)."""
    if said_at.tzinfo is None:
        raise ValueError("said_at must be timezone-aware")
    context = _Context(said_at.astimezone(tz), tz)
    located = _find(normalize(text[:REFERENCE_SCAN_CHARS]), context, _RULES + _PLAN_RULES)
    found = located[0] if located else None
    if found is None or found.recent or found.end - found.start > MAX_REFERENCE_SPAN:
        return None
    if time_problem(found.start) or time_problem(found.end):
        return None
    return found


def analyse_query(text: str, now: datetime, tz: tzinfo) -> TimeQuery | None:
    """The query's time range, the rest of the query, and whether the rest is only filler."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    normalized = normalize(text)
    found = _find(normalized, _Context(now.astimezone(tz), tz))
    if found is None:
        return None
    time_range, start, end = found
    rest = (normalized[:start] + " " + normalized[end:]).strip()
    return TimeQuery(range=time_range, rest=rest, time_only=_is_filler(rest))


def _is_filler(rest: str) -> bool:
    stripped = _TIME_ONLY_FILLER.sub(" ", rest)
    words = re.findall(r"[a-z0-9]+|[^\W\d_a-z]", stripped)
    meaningful = [w for w in words if w not in _EN_FILLER]
    return len(meaningful) < 2
