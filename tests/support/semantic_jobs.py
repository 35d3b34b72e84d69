"""Files written through the file system, and the semantic job their writes queue."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skald.compose.composition import Composition
from skald.domain.access.identity import Identity
from skald.domain.paths.uri import parse_uri
from skald.services.ingest.processing import identity_payload


def written_job(
    c: Composition, who: Identity, files: Iterable[tuple[str, bytes]]
) -> dict[str, Any]:
    """Writes each (URI, content) of `files` and returns one semantic job for them all."""
    written: list[str] = []
    dirs: list[str] = []
    for uri, data in files:
        _, change = c.fs.write(who, parse_uri(uri, user_id=who.user_id), data, "replace")
        written += change.written
        dirs += change.dirs
    return {
        **identity_payload(who),
        "written": written,
        "removed": [],
        "dirs": dirs,
        "processing_mode": "semantic_and_vectors",
    }
