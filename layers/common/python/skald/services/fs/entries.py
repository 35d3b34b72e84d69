"""The values VikingFS hands out: listing entries, what a mutation changed, a write's
result."""

from __future__ import annotations

from dataclasses import dataclass, field

from skald.domain.paths.uri import VikingURI


@dataclass(frozen=True)
class Entry:
    uri: VikingURI
    is_dir: bool
    size: int
    modified: float
    rel_path: str = ""
    etag: str = ""
    key: str = ""  # the blob's key, when the listing had it


@dataclass
class FsChange:
    """What a mutation did, for the semantic pipeline."""

    account: str
    user_id: str
    written: list[str] = field(default_factory=list)  # file URIs whose content changed
    removed: list[str] = field(default_factory=list)  # URIs (files or whole subtrees) that went
    dirs: list[str] = field(default_factory=list)  # directories created
    indexed_dirs: list[str] = field(default_factory=list)  # L0/L1 imported: indexed as they are
    processing_mode: str = "semantic_and_vectors"


@dataclass(frozen=True)
class WriteResult:
    uri: VikingURI
    mode: str
    written_bytes: int
    created: bool
    content_updated: bool
    sha256: str
