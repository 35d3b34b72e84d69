"""Which directory summaries a path's content reaches.

A directory's L1 (`.overview.md`) lists its children with their abstracts, and its L0
(`.abstract.md`) quotes the first of them; a folder's line in its parent's listing is that
folder's L0. So a file's text climbs, abstract by abstract, into every directory above it up
to its namespace root (a scope's preset directory), where the bottom-up refresh stops. The
semantic job refreshes that chain after each change; a removal hides it from the index at once
(services/ingest/forgetting.py) and the job brings it back, refreshed.
"""

from __future__ import annotations

from skald.domain.paths.names import ABSTRACT, OVERVIEW
from skald.domain.paths.uri import VikingURI


def namespace_root(uri: VikingURI) -> VikingURI:
    """Where bottom-up refresh stops: a scope's preset directory."""
    if uri.scope == "user" and len(uri.parts) >= 2:
        parts = uri.parts[:2]
        if uri.parts[1] == "peers" and len(uri.parts) >= 4:
            parts = uri.parts[:4]
        return VikingURI("user", parts)
    if uri.scope == "agent" and uri.parts:
        return VikingURI("agent", uri.parts[:1])
    return VikingURI(uri.scope, ())


def summarised_by(directory: VikingURI) -> VikingURI | None:
    """The directory whose summary a refresh of `directory`'s carries on to: its parent,
    unless `directory` is its namespace root (or the parent lies outside it)."""
    root = namespace_root(directory)
    parent = directory.parent
    if parent is None or directory == root or not parent.is_within(root):
        return None
    return parent


def summary_chain(uri: VikingURI) -> list[VikingURI]:
    """The directories whose summaries may quote `uri`'s content, nearest first: its parent,
    then each directory a refresh carries on to."""
    out: list[VikingURI] = []
    d = uri.parent
    while d is not None and not d.is_root:
        out.append(d)
        d = summarised_by(d)
    return out


def summary_records(directory: VikingURI) -> list[str]:
    """The URIs of a directory's summary records (its L0 and L1)."""
    return [str(directory.child(ABSTRACT)), str(directory.child(OVERVIEW))]
