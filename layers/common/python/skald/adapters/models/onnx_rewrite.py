"""One rewrite of an int8 ONNX encoder before onnxruntime loads it (the embedding rows a text
uses are dequantised, not the whole table), and the graph reading it shares with onnx_matmul.

The bundled MiniLM stores its word (and position) embeddings as int8 with one scale per row
and dequantises them in the graph: `Mul(Cast(table_q), scale) -> table`, then
`Gather(table, input_ids)`. onnxruntime's constant folding turns the first two into a float32
copy of the whole table (a row for every word of the vocabulary, resident for as long as the
model is loaded), of which a text reads a few dozen rows. Rewritten as
`Mul(Cast(Gather(table_q, ids)), Gather(scale, ids))`, the folding finds nothing to fold, the
int8 table (a quarter of the float32 copy) is all that stays, and each used row is computed
with the same two float32 operations as before: the vectors are bit-identical.

The model is a protobuf message; the descriptors below name only the fields the rewrites read
or write (nodes, their inputs, outputs, types and integer attributes; initializers' names,
shapes and data; graph outputs; opsets): `onnx_matmul` uses them too. Every other field
(metadata, the rest of each tensor) is carried through as an unknown field, byte for byte. A
graph with control flow (If, Loop, Scan: subgraphs that may read the table) is left alone.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

INT8 = 3  # TensorProto.DataType
FLOAT = 1
_LABEL = descriptor_pb2.FieldDescriptorProto
_CONTROL_FLOW = {"If", "Loop", "Scan"}


@functools.cache  # one set of classes: the rewrites pass messages between them
def messages() -> dict[str, Any]:
    """ModelProto, GraphProto, NodeProto, TensorProto, AttributeProto, ValueInfoProto and
    OperatorSetIdProto of onnx.proto, reduced to the fields the rewrites use (same numbers and
    types as onnx.proto: the same wire format)."""
    f = descriptor_pb2.FileDescriptorProto(
        name="skald_onnx_subset.proto", package="skald_onnx_subset", syntax="proto3"
    )

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> None:
        m = f.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            m.field.add(
                name=field_name, number=number, label=label, type=kind, type_name=type_name or None
            )

    rep, opt = _LABEL.LABEL_REPEATED, _LABEL.LABEL_OPTIONAL
    string, msg = _LABEL.TYPE_STRING, _LABEL.TYPE_MESSAGE
    int32, int64 = _LABEL.TYPE_INT32, _LABEL.TYPE_INT64
    message(
        "TensorProto",
        [
            ("dims", 1, rep, int64, ""),
            ("data_type", 2, opt, int32, ""),
            ("float_data", 4, rep, _LABEL.TYPE_FLOAT, ""),
            ("int32_data", 5, rep, int32, ""),
            ("name", 8, opt, string, ""),
            ("raw_data", 9, opt, _LABEL.TYPE_BYTES, ""),
            ("data_location", 14, opt, int32, ""),
        ],
    )
    message("ValueInfoProto", [("name", 1, opt, string, "")])
    message(
        "AttributeProto",
        [("name", 1, opt, string, ""), ("i", 3, opt, int64, ""), ("type", 20, opt, int32, "")],
    )
    message("OperatorSetIdProto", [("domain", 1, opt, string, ""), ("version", 2, opt, int64, "")])
    message(
        "NodeProto",
        [
            ("input", 1, rep, string, ""),
            ("output", 2, rep, string, ""),
            ("name", 3, opt, string, ""),
            ("op_type", 4, opt, string, ""),
            ("attribute", 5, rep, msg, ".skald_onnx_subset.AttributeProto"),
            ("domain", 7, opt, string, ""),
        ],
    )
    message(
        "GraphProto",
        [
            ("node", 1, rep, msg, ".skald_onnx_subset.NodeProto"),
            ("initializer", 5, rep, msg, ".skald_onnx_subset.TensorProto"),
            ("output", 12, rep, msg, ".skald_onnx_subset.ValueInfoProto"),
            ("value_info", 13, rep, msg, ".skald_onnx_subset.ValueInfoProto"),
        ],
    )
    message(
        "ModelProto",
        [
            ("graph", 7, opt, msg, ".skald_onnx_subset.GraphProto"),
            ("opset_import", 8, rep, msg, ".skald_onnx_subset.OperatorSetIdProto"),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"skald_onnx_subset.{name}")
        )
        for name in (
            "ModelProto",
            "NodeProto",
            "ValueInfoProto",
            "TensorProto",
            "AttributeProto",
            "OperatorSetIdProto",
        )
    }


@dataclass
class Parsed:
    """A model read for a rewrite: its message, plain copies of its nodes (the rewrite rebuilds
    the node list from them), which node makes each value and how often each value is read
    (a graph output counts as a read)."""

    proto: Any
    nodes: list[Any]
    producer: dict[str, int]
    uses: dict[str, int]


def parse(model: bytes) -> Parsed | None:
    """None for a graph with control flow (If, Loop, Scan): a subgraph may read a value the
    rewrite removes."""
    classes = messages()
    proto = classes["ModelProto"]()
    proto.ParseFromString(model)
    node_class = classes["NodeProto"]
    nodes = [node_class.FromString(n.SerializeToString()) for n in proto.graph.node]
    if any(n.op_type in _CONTROL_FLOW for n in nodes):
        return None
    uses: dict[str, int] = {o.name: 1 for o in proto.graph.output}
    for node in nodes:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    producer = {out: i for i, node in enumerate(nodes) for out in node.output}
    return Parsed(proto, nodes, producer, uses)


def dequantized(g: Parsed, value: str) -> tuple[int, int, str, str] | None:
    """(index of the Mul, index of the Cast, the int8 input, the scale) when `value` is
    `Mul(Cast(q), scale)` and only one node reads it and the Cast's result."""
    m = g.producer.get(value)
    if m is None or g.uses.get(value) != 1:
        return None
    mul = g.nodes[m]
    if mul.op_type != "Mul" or mul.domain or len(mul.input) != 2:
        return None
    c = g.producer.get(mul.input[0])
    if c is None or g.uses.get(mul.input[0]) != 1:
        return None
    cast = g.nodes[c]
    if cast.op_type != "Cast" or cast.domain:
        return None
    return m, c, cast.input[0], mul.input[1]


def _row_lookup(
    g: Parsed, node: Any, shapes: dict[str, tuple[Any, list[int]]]
) -> tuple[int, int, str, str] | None:
    """What dequantized() finds for a Gather of rows from an int8 table with one scale per
    row: the Mul and Cast, the int8 table and its scales; else None."""
    if node.op_type != "Gather" or node.domain or len(node.input) != 2:
        return None
    if any(a.name == "axis" and a.i != 0 for a in node.attribute):
        return None  # columns, not rows: the scales are per row
    found = dequantized(g, node.input[0])
    if found is None:
        return None
    _, _, quantized, scale = found
    q_type, q_dims = shapes.get(quantized, (None, []))
    s_type, s_dims = shapes.get(scale, (None, []))
    if q_type != INT8 or s_type != FLOAT or len(q_dims) != 2 or s_dims != [q_dims[0], 1]:
        return None
    return found


def gather_before_dequantize(model: bytes) -> bytes | None:
    """The model with every `Gather(Mul(Cast(int8 [V, D]), float [V, 1]), ids)` rewritten to
    dequantise only the gathered rows; None when the model has no such lookup (or its
    dequantised table is also used elsewhere), to be loaded as it is."""
    classes = messages()
    node_class, info_class = classes["NodeProto"], classes["ValueInfoProto"]
    g = parse(model)
    if g is None:
        return None
    graph, nodes = g.proto.graph, g.nodes
    shapes = {t.name: (t.data_type, list(t.dims)) for t in graph.initializer}
    rewrites: dict[int, list[Any]] = {}  # index of a Gather -> the nodes replacing it
    dropped: set[int] = set()  # the Cast and Mul that made the whole table
    gone: set[str] = set()  # values no longer computed
    for i, node in enumerate(nodes):
        found = _row_lookup(g, node, shapes)
        if found is None:
            continue
        m, c, quantized, scale = found
        mul, cast = nodes[m], nodes[c]
        table, ids = node.input
        rows_q, rows_f, rows_scale = (
            f"{table}__rows_q",
            f"{table}__rows_f",
            f"{table}__rows_scale",
        )
        take_q = node_class()
        take_q.CopyFrom(node)  # a Gather, with its attributes (axis 0)
        take_q.name = f"{node.name}__q"
        del take_q.input[:], take_q.output[:]
        take_q.input.extend([quantized, ids])
        take_q.output.append(rows_q)
        take_scale = node_class()
        take_scale.CopyFrom(take_q)
        take_scale.name = f"{node.name}__scale"
        del take_scale.input[:], take_scale.output[:]
        take_scale.input.extend([scale, ids])
        take_scale.output.append(rows_scale)
        to_float = node_class()
        to_float.CopyFrom(cast)  # with its `to` attribute
        del to_float.input[:], to_float.output[:]
        to_float.input.append(rows_q)
        to_float.output.append(rows_f)
        times = node_class()
        times.CopyFrom(mul)
        del times.input[:], times.output[:]
        times.input.extend([rows_f, rows_scale])
        times.output.extend(node.output)
        rewrites[i] = [take_q, take_scale, to_float, times]
        dropped.update((m, c))
        gone.update((table, mul.input[0]))
    if not rewrites:
        return None
    rebuilt: list[Any] = []
    for i, node in enumerate(nodes):
        if i in rewrites:
            rebuilt.extend(rewrites[i])
        elif i not in dropped:
            rebuilt.append(node)
    infos = [
        info_class.FromString(v.SerializeToString()) for v in graph.value_info if v.name not in gone
    ]  # shapes recorded for the dropped table
    del graph.node[:]
    graph.node.extend(rebuilt)
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return bytes(g.proto.SerializeToString())
