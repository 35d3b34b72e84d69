"""Read your deletes: a removal's index records go before the removal answers.

The blobs of a removed path go first (VikingFS.rm, mv, a session's delete, a pack replacing a
tree); then, still inside the request, every record of the path (every level and section, the
whole subtree of a folder) and the summary records (L0/L1) of each directory above it, which
quote it (domain/paths/summaries.py). The semantic job queued with the change refreshes those
directories and indexes them again; until then they are out of the index rather than marked
stale: no adapter has to filter anything, and no query path can miss the rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from skald.domain.paths.summaries import summary_chain, summary_records
from skald.domain.paths.uri import from_canonical
from skald.ports import SearchIndex


class Forgetting:
    def __init__(self, index: SearchIndex) -> None:
        self.index = index

    def forget(self, account: str, removed: Sequence[str]) -> int:
        """Drops the records of each removed URI (and of everything below it), then hides the
        summaries of the directories above; returns how many records of the removed paths
        went (the summaries, which come back refreshed, are not counted)."""
        uris = list(dict.fromkeys(removed))
        gone = sum(self.index.delete_prefix(account, uri) for uri in uris)
        above: dict[str, None] = {}
        for uri in uris:
            for d in summary_chain(from_canonical(uri)):
                above.update(dict.fromkeys(summary_records(d)))
        if above:
            self.index.delete_uris(account, list(above))
        return gone
