"""The keyword channel's text analysis: message text -> search terms, in Python.

PostgreSQL's parsers see a Chinese sentence as one token and the embedded server has no
``pg_trgm`` or zhparser, so terms are made here and stored with ``array_to_tsvector`` (no
further processing by PostgreSQL) in a GIN-indexed column. The same function makes the terms
of a stored message and of a query, so they always agree.

Terms (measured on the retrieval benchmark, see ``bench/RESULTS.md``):

* runs of CJK characters -> overlapping character bigrams (a run of one character -> that
  character). Bigrams need no dictionary, never split a name the way a segmenter can
  (jieba cuts "小明说" as "小 / 明说"), and any substring of two or more characters matches;
* runs of letters and digits -> lower-cased tokens, so ``ORD-123456`` gives ``ord-123456``,
  ``ord123456``, ``ord`` and ``123456``, and ``ORD123456`` also gives ``ord`` and ``123456``:
  an order id, a number or an English name inside a Chinese sentence matches on its own.

Ranking (BM25 without term frequency, scoped to one session) happens in SQL; see
``store.SQL_KEYWORD_CANDIDATES``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

# Bump when the terms of a text change: stored rows are then re-analysed by the backfill.
ANALYZER_VERSION = "bigram-v1"

# Bounds that keep one huge message from making a huge tsvector (limit 1 MB) or query.
MAX_TERM_CHARS = 64
MAX_DOCUMENT_TERMS = 4096
MAX_QUERY_TERMS = 64

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_RUNS = re.compile(rf"[{_CJK}]+|[a-z0-9]+(?:[-_.:/#@+][a-z0-9]+)*")
_ALNUM_PARTS = re.compile(r"[a-z]+|[0-9]+")
_SEPARATORS = re.compile(r"[-_.:/#@+]")


def word_list(*lines: str) -> list[str]:
    """Space-separated words, written a few to a line."""
    return " ".join(lines).split()


# English words that carry no meaning for matching (queries and documents alike).
ENGLISH_STOPWORDS = frozenset(
    word_list(
        "a an the and or but if of to in on at by for with from as is are was were be been am",
        "do does did done have has had i me my mine you your yours he him his she her it its",
        "we us our they them their this that these those what which who whom whose when where",
        "why how there here not no so too very can could will would shall should may might",
        "must just about into over than then also any some all again ever yet s t d ll re ve m",
    )
)

# Question and filler phrases of Chinese queries: they say nothing about which message is
# meant, so a query drops them before making bigrams. Longest first, so 还记得 beats 记得.
QUERY_STOP_PHRASES = sorted(
    word_list(
        "什么 啥 哪里 哪儿 哪个 哪些 哪天 怎么 怎样 如何 为什么 多少 几个 几点 是不是 有没有",
        "是否 吗 呢 吧 啊 呀 嘛 还记得 记得 记不记得 之前 以前 上次 告诉我 告诉 说过 提到过",
        "提到 提过 聊过 讲过 说了 聊了 讲了 说的 聊的 我们 你们 他们 咱们 一下 知道 请问",
        "问一下 那个 这个 一个 的话",
    ),
    key=len,
    reverse=True,
)
_QUERY_STOP = re.compile("|".join(re.escape(p) for p in QUERY_STOP_PHRASES))


def normalize(text: str) -> str:
    """NFKC (full-width letters and digits become ASCII) and lower case."""
    return unicodedata.normalize("NFKC", text).lower()


def _alnum_terms(token: str) -> Iterable[str]:
    if (len(token) < 2 and not token.isdigit()) or token in ENGLISH_STOPWORDS:
        return
    yield token
    joined = _SEPARATORS.sub("", token)
    if joined != token:
        yield joined
    parts = _ALNUM_PARTS.findall(token)
    if len(parts) > 1:
        for part in parts:
            if (part.isdigit() or len(part) >= 2) and part not in ENGLISH_STOPWORDS:
                yield part


def _cjk_terms(run: str) -> Iterable[str]:
    if len(run) == 1:
        yield run
        return
    for i in range(len(run) - 1):
        yield run[i : i + 2]


def terms(text: str, *, limit: int = MAX_DOCUMENT_TERMS) -> list[str]:
    """The distinct search terms of ``text``, in first-seen order, at most ``limit``."""
    seen: dict[str, None] = {}
    for match in _RUNS.finditer(normalize(text)):
        run = match.group()
        produced = _cjk_terms(run) if not run[0].isascii() else _alnum_terms(run)
        for term in produced:
            if len(term) <= MAX_TERM_CHARS:
                seen.setdefault(term, None)
                if len(seen) >= limit:
                    return list(seen)
    return list(seen)


def document_terms(text: str) -> list[str]:
    """The terms stored for a message (see the module docstring)."""
    return terms(text)


def query_terms(text: str) -> list[str]:
    """The terms a query searches for: its question words and fillers dropped first."""
    return terms(_QUERY_STOP.sub(" ", normalize(text)), limit=MAX_QUERY_TERMS)


_PARTICLES = frozenset("的了")


def query_words(text: str) -> list[tuple[str, ...]]:
    """A query's words, each as its terms: a run of CJK characters (its bigrams, or the lone
    character), or a letter-and-digit token; question words and fillers dropped first, at
    most ``MAX_QUERY_TERMS`` words. ``query_terms`` is these terms flattened; kept apart, they
    say whether a text holds *a word* of the query rather than any one of its bigrams."""
    words: list[tuple[str, ...]] = []
    opening = text[: MAX_QUERY_TERMS * MAX_TERM_CHARS]  # a pasted book is not a query
    for match in _RUNS.finditer(_QUERY_STOP.sub(" ", normalize(opening))):
        run = match.group()
        if not run[0].isascii():
            # A particle left alone or at an edge by a dropped phrase or time word (昨天的周会
            # -> 的周会, 我们的 -> 的) is no word; two characters may be one (的士, 了解).
            if run in _PARTICLES:
                continue
            if len(run) >= 3:
                run = run.removeprefix("的")
                run = run[:-1] if run[-1] in _PARTICLES else run
        found = _cjk_terms(run) if not run[0].isascii() else _alnum_terms(run)
        word = tuple(dict.fromkeys(t for t in found if len(t) <= MAX_TERM_CHARS))
        if word:
            words.append(word)
            if len(words) >= MAX_QUERY_TERMS:
                break
    return words


def conversation_terms(message: str, earlier: Sequence[str]) -> list[str]:
    """The terms of a conversational query: the message's, then each earlier line's from the
    newest back, until ``MAX_QUERY_TERMS`` — the end of a conversation is what is asked about,
    and a long context would otherwise fill the limit with its opening lines."""
    return [term for term, _ in weighted_conversation_terms(message, earlier, 1.0)]


def weighted_conversation_terms(
    message: str, earlier: Sequence[str], context_weight: float
) -> list[tuple[str, float]]:
    """``conversation_terms`` with each term's weight in the keyword score: 1 for a term of
    the message, ``context_weight`` for one only the earlier lines have. The message is what
    is asked; the lines before it may be about something else entirely ("今天又加班了" before
    "上次说想买的那个球拍叫什么"), and their terms must not outvote the message's."""
    found: dict[str, float] = dict.fromkeys(query_terms(message), 1.0)
    for line in reversed(earlier):
        for term in query_terms(line):
            if len(found) >= MAX_QUERY_TERMS:
                return list(found.items())
            found.setdefault(term, context_weight)
    return list(found.items())


def substring_terms(text: str) -> list[str]:
    """Terms every message containing ``text`` is stored with: the bigrams of its CJK runs
    of two or more characters (such a run lies inside a run of the message, so its bigrams are
    the message's too). Letters and digits may be the middle of a longer token and a lone
    character is no bigram: neither gives a term here."""
    found: dict[str, None] = {}
    for match in _RUNS.finditer(normalize(text)):
        run = match.group()
        if len(run) >= 2 and not run[0].isascii():
            found.update(dict.fromkeys(_cjk_terms(run)))
    return list(found)[:MAX_QUERY_TERMS]


def _quoted(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def tsquery_all(words: Iterable[str]) -> str | None:
    """A ``tsquery`` literal matching all of ``words`` (each quoted, taken as is); None if none."""
    quoted = [_quoted(w) for w in words]
    return " & ".join(quoted) if quoted else None


def tsquery_any(words: Iterable[str]) -> str | None:
    """A ``tsquery`` literal matching any of ``words`` (each quoted, taken as is); None if none."""
    quoted = [_quoted(w) for w in words]
    return " | ".join(quoted) if quoted else None


def required_phrases(keywords: Iterable[str]) -> list[str]:
    """Normalised, non-blank required keywords (matched as substrings of the content)."""
    found = []
    for keyword in keywords:
        cleaned = normalize(keyword).strip()
        if cleaned and cleaned not in found:
            found.append(cleaned)
    return found
