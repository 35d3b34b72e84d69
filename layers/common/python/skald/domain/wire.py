"""What a service result is on the wire, beyond its dataclass fields.

Results are stdlib dataclasses; the HTTP edge serialises each by its declared types and
refuses a value of another type (skald.api.envelope). OpenViking's shapes leave some optional
keys out rather than writing null: such a field is `Annotated[T | None, OMIT_NONE]`. This
field marker is the one pydantic name the inner layers use: it only annotates, the dataclass
stays a plain one.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, WithJsonSchema


def _is_none(value: Any) -> bool:
    return value is None


# A None here is left out of the JSON instead of written as null.
OMIT_NONE: Any = Field(exclude_if=_is_none)

_SCOPES = "resources|user|agent|system"
# A URI as the server writes it: canonical, no short forms (a directory may end in `/`).
URI_PATTERN = rf"^viking://(?:(?:{_SCOPES})(?:/[^/]+)*/?)?$"

# A `viking://` URI field of a result: a str, documented with its format and pattern.
WireUri = Annotated[
    str, WithJsonSchema({"type": "string", "format": "viking-uri", "pattern": URI_PATTERN})
]

# A field whose wire name is no Python name (`from`): `Annotated[T, wire_name("from")]`, in a
# dataclass whose `__pydantic_config__` is BY_WIRE_NAME.
BY_WIRE_NAME: Any = ConfigDict(serialize_by_alias=True)


def wire_name(name: str) -> Any:
    return Field(serialization_alias=name)


__all__ = ["BY_WIRE_NAME", "OMIT_NONE", "URI_PATTERN", "WireUri", "wire_name"]
