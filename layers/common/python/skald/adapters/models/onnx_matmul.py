"""The encoder's int8 weight matrices multiplied as int8, not dequantised to float32 first.

The bundled MiniLM stores each of its 36 weight matrices as int8 with one scale per output
column and multiplies through `MatMul(x, Mul(Cast(w_q), scale))`. onnxruntime's constant
folding turns that into a float32 copy of every matrix, and each run reads all of it:
for a short query the encoder waits on memory, not on arithmetic. Rewritten as onnxruntime's
`com.microsoft.MatMulNBits` (8 bits, blocks of 128 along the inner dimension, every block of a
column sharing the column's scale, the default zero point 128), the int8 weights are all that
stays, and `accuracy_level` 4 multiplies them with the activations quantised to int8 per block.

This changes the numbers, slightly: the vectors stay very close to the float32 ones (their
cosine and the retrieval benchmark's recall are measured in bench/), close enough that an
index built with either can be searched with the other. The product takes its rows in tiles
and leftover rows by another path with other numbers, so the embedder pads each run to a whole
number of tiles (`onnx_embedder.aligned_width`): a text's vector does not depend on its batch.
A model the rewrite does not apply to is left alone, and one that onnxruntime will not load
rewritten is loaded without it (onnx_embedder). The embedder applies it where the CPU has VNNI
instructions (`onnx_embedder.cpu_has_int8_dot`); `SKALD_ONNX_INT8_MATMULS` forces it on or off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from skald.adapters.models.onnx_rewrite import FLOAT, INT8, dequantized, messages, parse

BITS = 8
# Blocks of 128 along the inner dimension: smaller blocks keep the results a little closer to
# float32's but win back much less of the time; a smaller block only when the inner size
# needs it.
BLOCK = 128
ACCURACY_INT8 = 4  # MatMulNBits: activations quantised to int8 per block, int8 products
_UINT8 = 2  # TensorProto.DataType
_ATTR_INT = 2  # AttributeProto.AttributeType
_EXTERNAL = 1  # TensorProto.DataLocation
MS_DOMAIN = "com.microsoft"


def _array(tensor: Any, dtype: type[np.generic]) -> np.ndarray | None:
    """An initializer's values, or None when they live outside the model."""
    if tensor.data_location == _EXTERNAL:
        return None
    shape = tuple(tensor.dims)
    if tensor.raw_data:
        return np.frombuffer(tensor.raw_data, dtype=dtype).reshape(shape)
    values = tensor.float_data if dtype is np.float32 else tensor.int32_data
    return np.asarray(values, dtype=dtype).reshape(shape)


def _block(inner: int) -> int | None:
    return next((b for b in (BLOCK, 64, 32, 16) if inner % b == 0), None)


@dataclass(frozen=True)
class _Int8MatMul:
    """A MatMul whose right side is a dequantised int8 matrix the rewrite applies to."""

    mul_cast: tuple[int, int]  # the indexes of the Mul and Cast nodes that dequantise
    weights: np.ndarray  # int8 [K, N]
    scales: np.ndarray  # float [1, N]
    inner: int  # K
    cols: int  # N
    block: int


def _match(g: Any, node: Any, inits: dict[str, Any]) -> _Int8MatMul | None:
    if node.op_type != "MatMul" or node.domain or len(node.input) != 2:
        return None
    found = dequantized(g, node.input[1])
    if found is None:
        return None
    m, c, quantized, scale = found
    q_tensor, s_tensor = inits.get(quantized), inits.get(scale)
    if (
        q_tensor is None
        or s_tensor is None
        or q_tensor.data_type != INT8
        or s_tensor.data_type != FLOAT
        or len(q_tensor.dims) != 2
    ):
        return None
    inner, cols = (int(d) for d in q_tensor.dims)
    block = _block(inner)
    if block is None or list(s_tensor.dims) != [1, cols]:
        return None
    weights, scales = _array(q_tensor, np.int8), _array(s_tensor, np.float32)
    if weights is None or scales is None:
        return None
    return _Int8MatMul((m, c), weights, scales, inner, cols, block)


def _fused(node: Any, hit: _Int8MatMul, classes: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The MatMulNBits node that replaces `node`, and its two new initializers."""
    node_class, tensor_class = classes["NodeProto"], classes["TensorProto"]
    inner, cols, block = hit.inner, hit.cols, hit.block
    blocks = inner // block
    packed = tensor_class(
        name=f"{node.name}__int8_weights", data_type=_UINT8, dims=[cols, blocks, block]
    )
    # MatMulNBits stores unsigned codes around a zero point of 128, one column per row.
    packed.raw_data = (hit.weights.T.astype(np.int16) + 128).astype(np.uint8).tobytes()
    column_scales = tensor_class(
        name=f"{node.name}__int8_scales", data_type=FLOAT, dims=[cols * blocks]
    )
    column_scales.raw_data = (
        np.repeat(hit.scales.reshape(cols, 1), blocks, axis=1).astype("<f4").tobytes()
    )
    fused = node_class(
        name=f"{node.name}__int8",
        op_type="MatMulNBits",
        domain=MS_DOMAIN,
        input=[node.input[0], packed.name, column_scales.name],
        output=list(node.output),
    )
    for key, value in (
        ("K", inner),
        ("N", cols),
        ("bits", BITS),
        ("block_size", block),
        ("accuracy_level", ACCURACY_INT8),
    ):
        fused.attribute.add(name=key, i=value, type=_ATTR_INT)
    return fused, packed, column_scales


def int8_matmuls(model: bytes) -> bytes | None:
    """The model with every `MatMul(x, Mul(Cast(int8 [K, N]), float [1, N]))` rewritten to one
    MatMulNBits node reading the int8 weights; None when there is none to rewrite."""
    classes = messages()
    g = parse(model)
    if g is None:
        return None
    proto, nodes = g.proto, g.nodes
    inits = {t.name: t for t in proto.graph.initializer}
    replaced: dict[int, Any] = {}
    dropped: set[int] = set()
    added: list[Any] = []
    for i, node in enumerate(nodes):
        hit = _match(g, node, inits)
        if hit is None:
            continue
        fused, packed, column_scales = _fused(node, hit, classes)
        replaced[i] = fused
        dropped.update(hit.mul_cast)
        added += [packed, column_scales]
    if not replaced:
        return None
    _rewrite_graph(proto, nodes, replaced, dropped, added)
    return bytes(proto.SerializeToString())


def _rewrite_graph(
    proto: Any, nodes: list[Any], replaced: dict[int, Any], dropped: set[int], added: list[Any]
) -> None:
    """Swaps in the fused nodes and their initializers, and drops what nothing reads now."""
    graph = proto.graph
    kept = [replaced.get(i, n) for i, n in enumerate(nodes) if i not in dropped]
    still_read = {name for n in kept for name in n.input} | {o.name for o in graph.output}
    del graph.node[:]
    graph.node.extend(kept)
    for j in reversed(range(len(graph.initializer))):  # the int8 matrices and their scales
        if graph.initializer[j].name not in still_read:
            del graph.initializer[j]
    gone = {out for i in dropped for out in nodes[i].output}  # the float32 matrices
    for j in reversed(range(len(graph.value_info))):
        if graph.value_info[j].name in gone:
            del graph.value_info[j]
    graph.initializer.extend(added)
    if not any(o.domain == MS_DOMAIN for o in proto.opset_import):
        proto.opset_import.add(domain=MS_DOMAIN, version=1)
