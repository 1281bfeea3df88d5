"""What kind of line a turn is, for recall: a statement, a question, the bot's "I don't know",
or the bot's restatement of what a person said. Pure functions, no I/O.

A recall asked "周会几点？" finds the earlier "周会改到几点了？" and the bot's "这个我不记得了" as
close as the line that answers it ("周五的周会改到下午三点了"): they share its words and its
topic, but carry no fact. ``recall.statements`` ranks such lines below statements; this module
only says which lines they are.

* A **question** is a line whose every clause of substance asks (ends in ？/?, or a Chinese
  clause ends in 吗/呢/么 or holds an interrogative such as 几点/多少/什么时候, or an English
  clause starts with a question word). A line that also states something ("我明天去北京，你说
  带什么？") is not one: its statement is what a recall may want.
* A **non-answer** is a bot line saying it does not know or found nothing (不记得, 没有找到,
  "I don't remember").
* An **echo** is a bot line restating an earlier person's statement: beyond its acknowledgement
  ("好的，记住啦："), most of what it says comes from that line. A bot line answering a person's
  *question* in its words ("周会改到几点了？" → "周会改到下午三点了") is no echo: it adds the fact.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from enum import Enum

from .repeats import MAX_FOLDED


class Kind(Enum):
    STATEMENT = "statement"
    QUESTION = "question"
    NON_ANSWER = "non-answer"
    ECHO = "echo"


_CLAUSES = re.compile(r"[，,。．.！!？?；;…~～\n]+|(?<=[？?])")
_ASKED = re.compile(r"[？?]\s*$")
_ZH_PARTICLE = re.compile(r"(吗|嘛|么|呢)[啊呀哈]?$")
_ZH_ASKING = re.compile(
    r"几点|几号|几月|几天|几个|几次|多少|多久|多大|多远|什么时候|啥时候|什么|啥|哪|谁|为什么|为啥"
    r"|怎么|咋|是不是|有没有|是否|能不能|可不可以|要不要|对不对|还记得"
)
# "我什么都不想吃", "谁也不知道", "我不知道他几点来": an interrogative before 都/也, or after
# saying one does not know, asks nothing (without a question mark).
_ZH_ANY = re.compile(r"(什么|啥|哪\S?|谁|怎么)[都也]|不知道|不清楚|不记得|忘了")
_EN_ASKING = re.compile(
    r"^(what|when|where|who|whom|whose|why|how|which|do|does|did|is|are|was|were|can|could"
    r"|would|will|should|have|has|had|any|remember)\b",
    re.IGNORECASE,
)
_TOKENS = re.compile(r"[a-z0-9]+|[^\W\d_a-z]")
_YOUR = re.compile(r"\b(?:you|your|yours)\b", re.IGNORECASE)
_MINE = {"you": "i", "your": "my", "yours": "mine"}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_EN_WORD = re.compile(r"[A-Za-z0-9']+")
# A clause with fewer than these says nothing on its own ("嗯", "Hey Mel", "对了").
MIN_CJK = 4
MIN_WORDS = 3

_NOT_KNOWING = re.compile(
    r"不记得|记不得|记不清|想不起|没印象|没有印象|不知道|不清楚|不太确定|没有找到|没找到|找不到"
    r"|没有相关|没有.{0,6}记录|没有.{0,6}记忆|没听你说过|没有提到过|没提过"
    r"|\bI (?:don't|do not|can't|cannot|couldn't) (?:remember|recall|know|find)\b"
    r"|\bI'm not sure\b|\bno record\b|\bnothing (?:found|about)\b",
    re.IGNORECASE,
)

# An echo: at least this share of its own character pairs (its acknowledgement left out, 你 read
# as 我) come from a person's statement, and at least ``MIN_ECHO_PAIRS`` of them.
ECHO_OWN_SHARE = 0.6
MIN_ECHO_PAIRS = 4
_ACKNOWLEDGED = re.compile(
    r"^(?:\s|[，,。.！!：:~～]|好的|好嘞|好|嗯嗯|嗯|收到|明白|了解|知道了|没问题"
    r"|ok(?:ay)?|got it|noted|我?记住(?:了|啦)|我?记下(?:了|啦)|帮你记(?:住|下)(?:了|啦)?)+",
    re.IGNORECASE,
)


def _substantial(clause: str) -> bool:
    if len(_CJK.findall(clause)) >= MIN_CJK:
        return True
    return len(_EN_WORD.findall(clause)) >= MIN_WORDS


def _clause_asks(clause: str, marked: bool) -> bool:
    text = clause.strip()
    if marked:
        return True
    if _ZH_PARTICLE.search(text):
        return True
    if _ZH_ASKING.search(text) and not _ZH_ANY.search(text):
        return True
    return bool(_EN_ASKING.match(text))


def is_question(text: str) -> bool:
    """Whether every clause of substance of ``text`` asks (and one does): see the module."""
    asked = False
    for sentence in re.split(r"(?<=[。．！!？?；;\n])", text):
        marked = bool(_ASKED.search(sentence))
        clauses = [c for c in _CLAUSES.split(sentence) if c.strip()]
        for index, clause in enumerate(clauses):
            # In a sentence that ends in ？ the last clause asks; an earlier one of substance
            # that does not ask itself is a statement ("我明天去北京，带什么？").
            if _clause_asks(clause, marked and index == len(clauses) - 1):
                asked = True
            elif _substantial(clause):
                return False
    return asked


def is_non_answer(text: str) -> bool:
    """Whether a bot line says it does not know or found nothing."""
    return bool(_NOT_KNOWING.search(text))


def pairs(text: str) -> frozenset[str]:
    """The pairs of neighbouring tokens of ``text`` (NFKC, case-folded): a token is a CJK
    character or a word of letters and digits, so Chinese is compared by character pairs and
    English by word pairs (letter pairs would find "a support group for new moms" in "an LGBTQ
    support group")."""
    tokens = _TOKENS.findall(unicodedata.normalize("NFKC", text[:MAX_FOLDED]).casefold())
    return frozenset(map(" ".join, itertools.pairwise(tokens)))


def restated_pairs(reply: str) -> frozenset[str]:
    """The pairs of what a bot ``reply`` says beyond its acknowledgement ("好的，记住啦："), read
    in the person's words (the bot's 你 / "your" is their 我 / "my")."""
    restated = _ACKNOWLEDGED.sub("", reply).replace("你", "我")
    return pairs(_YOUR.sub(lambda m: _MINE[m.group().lower()], restated))


def echoes_pairs(restated: frozenset[str], said: frozenset[str]) -> bool:
    """``echoes`` on pairs made once (``restated_pairs`` of the reply, ``pairs`` of the line)."""
    shared = len(restated & said)
    return shared >= MIN_ECHO_PAIRS and shared >= ECHO_OWN_SHARE * len(restated)


def echoes(reply: str, said: str) -> bool:
    """Whether the bot's ``reply`` restates the person's ``said`` (see the module): what it
    says beyond its acknowledgement comes mostly from ``said``."""
    return echoes_pairs(restated_pairs(reply), pairs(said))


def kind_of(text: str, role: str, earlier_said: Sequence[str] = ()) -> Kind:
    """The kind of a line said by ``role`` ("user" or "assistant"); ``earlier_said``: lines
    people said before it, which a bot line may echo."""
    if role == "assistant":
        if is_non_answer(text):
            return Kind.NON_ANSWER
        if any(echoes(text, said) for said in earlier_said if not is_question(said)):
            return Kind.ECHO
    if is_question(text):
        return Kind.QUESTION
    return Kind.STATEMENT
