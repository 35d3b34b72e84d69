"""DynamoDB item codecs of the low-level client: typed attribute values (numbers as strings,
JSON as one string attribute), typed reads of them, keys, and expression placeholders.

Numbers are written as strings (`repr` of a float round-trips exactly) and read back without
Decimal. JSON fields (settings, meta, result) are stored as strings: one attribute, no
32-level nesting limit, no empty-set or float-to-Decimal surprises.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

Item = dict[str, Any]  # DynamoDB JSON: {"name": {"S": "..."}, ...}


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: float | int) -> dict[str, str]:
    if isinstance(value, bool):
        raise TypeError("a bool is not a number")
    if isinstance(value, int):
        return {"N": str(value)}
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"DynamoDB cannot store {text}")
    return {"N": text}


def js(value: Any) -> dict[str, str]:
    return {"S": json.dumps(value, ensure_ascii=False, separators=(",", ":"))}


def get_s(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    return None if value is None or "S" not in value else str(value["S"])


def req_s(item: Mapping[str, Any], name: str) -> str:
    value = get_s(item, name)
    if value is None:
        raise ValueError(f"item {item.get('pk')}/{item.get('sk')} lacks {name}")
    return value


def get_f(item: Mapping[str, Any], name: str) -> float | None:
    value = item.get(name)
    return None if value is None or "N" not in value else float(value["N"])


def req_f(item: Mapping[str, Any], name: str) -> float:
    value = get_f(item, name)
    return 0.0 if value is None else value


def req_i(item: Mapping[str, Any], name: str) -> int:
    value = item.get(name)
    # Decimal: DynamoDB may hand an integer back as "3E+1".
    return 0 if value is None or "N" not in value else int(Decimal(value["N"]))


def get_b(item: Mapping[str, Any], name: str) -> bool:
    value = item.get(name)
    return bool(value is not None and value.get("BOOL"))


def get_json(item: Mapping[str, Any], name: str) -> Any:
    text = get_s(item, name)
    return None if text is None else json.loads(text)


def key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": s(pk), "sk": s(sk)}


class Names:
    """Placeholders for attribute names (several of ours are reserved words: status, ttl)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        placeholder = f"#n{len(self.names)}"
        for existing, attr in self.names.items():
            if attr == attribute:
                return existing
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.names:
            out["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            out["ExpressionAttributeValues"] = dict(self.values)
        return out


def update_expression(
    sets: Mapping[str, Any],
    names: Names,
    *,
    removes: Iterable[str] = (),
    adds: Mapping[str, Any] | None = None,
) -> str:
    """`SET a = :x ... ADD c :z ... REMOVE b ...` from attribute -> DynamoDB value maps."""
    clauses = []
    if sets:
        clauses.append(
            "SET " + ", ".join(f"{names.name(a)} = {names.value(v)}" for a, v in sets.items())
        )
    if adds:
        clauses.append(
            "ADD " + ", ".join(f"{names.name(a)} {names.value(v)}" for a, v in adds.items())
        )
    removed = list(removes)
    if removed:
        clauses.append("REMOVE " + ", ".join(names.name(a) for a in removed))
    return " ".join(clauses)
