"""The participants a query names (issue 26 part 2, ``memory_core.lang.names``)."""

from __future__ import annotations

from memory_core.lang.keywords import query_terms
from memory_core.lang.names import asked_about, named_speakers, without_names

PAIR = ["Caroline", "Melanie"]


def test_a_question_naming_one_speaker_finds_that_name_only():
    assert named_speakers("What did Caroline research?", PAIR) == ("Caroline",)
    assert named_speakers("When did Melanie's kids go camping?", PAIR) == ("Melanie",)
    assert named_speakers("What do Caroline and Melanie both like?", PAIR) == tuple(PAIR)


def test_a_latin_name_must_stand_as_a_whole_word_in_any_case():
    assert named_speakers("what did caroline say", PAIR) == ("Caroline",)
    assert named_speakers("Jones went home", ["Jon"]) == ()
    assert named_speakers("Did Jon go home?", ["Jon"]) == ("Jon",)


def test_a_chinese_name_is_found_inside_the_sentence():
    assert named_speakers("小明上次说的那家店", ["小明", "小红"]) == ("小明",)
    assert named_speakers("那家店在哪", ["小明", "小红"]) == ()


def test_a_full_width_or_spaced_card_matches_its_plain_mention():
    assert named_speakers("ＡＢＣ上次说了什么", ["ABC"]) == ("ABC",)
    assert named_speakers("What did Caroline Smith say?", ["Caroline  Smith"]) == (
        "Caroline  Smith",
    )


def test_a_one_character_name_names_nobody():
    assert named_speakers("我想吃面", ["面", "A"]) == ()
    assert named_speakers("a cat", ["A"]) == ()


def test_the_name_leaves_the_keyword_terms_and_the_topic_stays():
    stripped = without_names("What did Caroline say about Melanie's pottery class?", PAIR)
    terms = query_terms(stripped)
    assert "caroline" not in terms and "melanie" not in terms
    assert {"pottery", "class"} <= set(terms)
    assert query_terms(without_names("小明上次说的那家面包店", ["小明"])) == query_terms(
        "那家面包店"
    )


def test_the_longest_name_goes_first():
    assert "smith" not in query_terms(
        without_names("Caroline Smith said", ["Caroline", "Caroline Smith"])
    )


def test_a_name_said_to_its_bearer_is_not_asked_about():
    pair = ["小诗", "小明"]
    assert asked_about("小诗，我上次说的那家店叫什么", pair) == ()
    assert asked_about("@小诗 我上次说的那家店叫什么", pair) == ()
    assert asked_about("我上次说的那家店叫什么来着，小诗？", pair) == ()
    assert asked_about("Caroline, what did Melanie paint?", ["Caroline", "Melanie"]) == ("Melanie",)


def test_a_name_in_the_sentence_is_asked_about():
    pair = ["小诗", "小明"]
    assert asked_about("小诗上次推荐的那家店叫什么", pair) == ("小诗",)
    assert asked_about("小诗 小明说的店在哪", pair) == ("小明",)
    assert asked_about("What did Caroline research?", ["Caroline"]) == ("Caroline",)


def test_an_english_name_opening_or_closing_a_sentence_without_a_pause_is_asked_about():
    pair = ["Caroline", "Melanie"]
    assert asked_about("Melanie went camping when?", pair) == ("Melanie",)
    assert asked_about("What symbols are important to Caroline?", pair) == ("Caroline",)
    assert asked_about("小诗 我上次说的那家店叫什么", ["小诗"]) == ()
