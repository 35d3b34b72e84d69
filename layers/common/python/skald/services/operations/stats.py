"""Memory health and per-session extraction statistics (`/api/v1/stats/*`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from skald.domain.access.identity import Identity
from skald.domain.memory.stats import category_of, check_category, memory_stats
from skald.domain.paths.uri import VikingURI
from skald.ports import IndexFilter, SearchIndex, SessionStore
from skald.services.fs.filesystem import VikingFS
from skald.services.operations.results import MemoryStats, SessionStats
from skald.services.sessions.service import SessionService

PAGE = 1000


class StatsService:
    def __init__(
        self,
        fs: VikingFS,
        index: SearchIndex,
        sessions: SessionService,
        store: SessionStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fs = fs
        self.index = index
        self.sessions = sessions
        self.store = store
        self.clock = clock

    def memories(self, identity: Identity, category: str | None = None) -> MemoryStats:
        check_category(category)
        root = VikingURI("user", (identity.user_id, "memories"))
        # Storage is the truth for counts; the index gives each memory's times.
        files = [e.rel_path for e in self.fs.iter_files(identity, root)]
        prefix = f"{root}/"
        times: dict[str, tuple[float, float]] = {}  # one per memory, whatever its sections
        flt = IndexFilter(scopes=[str(root)], context_types=["memory"], levels=[2])
        cursor: str | None = None
        while True:
            page, cursor = self.index.scroll(identity.account_id, flt, limit=PAGE, cursor=cursor)
            for rec in page:
                cat = category_of(rec.uri.removeprefix(prefix))
                if cat is not None and category in (None, cat):
                    times[rec.uri] = (rec.created_at, rec.updated_at)
            if cursor is None:
                break
        return MemoryStats(**memory_stats(files, list(times.values()), self.clock(), category))

    def session(self, identity: Identity, session_id: str) -> SessionStats:
        rec = self.sessions.get(identity, session_id)
        turns = contexts = skills = 0
        for msg in self.store.list_messages(identity.account_id, identity.user_id, session_id):
            turns += msg.role == "user"
            for part in msg.parts:
                if part.get("type") == "context":
                    if part.get("context_type") == "skill":
                        skills += 1
                    else:
                        contexts += 1
                elif part.get("type") == "tool" and part.get("skill_uri"):
                    skills += 1
        archives = self.store.list_archives(identity.account_id, identity.user_id, session_id)
        return SessionStats(
            session_id=rec.session_id,
            total_turns=turns,
            memories_extracted=sum(int(a.meta.get("memories", 0)) for a in archives),
            contexts_used=contexts,
            skills_used=skills,
        )
