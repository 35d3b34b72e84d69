"""What an agent does in one step that the HTTP API spreads over several calls: edit a file by
exact replacement, remember a conversation (messages, then commit), add a resource from inline
text or from a URL. Composed from the other services, so the rules and the processing stay
theirs."""

from __future__ import annotations

import hashlib
from dataclasses import asdict

from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, SkaldError
from skald.domain.paths.uri import VikingURI
from skald.domain.sources.remote import is_remote
from skald.domain.text.edits import replace_exact
from skald.services.fs.filesystem import VikingFS
from skald.services.ingest.content import BatchOperation, ContentService
from skald.services.ingest.resources import AddResourceRequest, ResourceService
from skald.services.ingest.results import Added
from skald.services.sessions.service import NewMessage, SessionService
from skald.services.skills.results import Edited, Remembered


class AgentService:
    def __init__(
        self,
        fs: VikingFS,
        content: ContentService,
        resources: ResourceService,
        sessions: SessionService,
    ) -> None:
        self.fs = fs
        self.content = content
        self.resources = resources
        self.sessions = sessions

    def edit(
        self,
        identity: Identity,
        uri: VikingURI,
        old: str,
        new: str,
        *,
        replace_all: bool = False,
        wait: bool = False,
    ) -> Edited:
        """Replaces `old` by `new` in the stored text. The write is conditional on the content
        read here, so an edit racing another writer fails with CONFLICT instead of losing it."""
        raw = self.fs.read_bytes(identity, uri)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(f"{uri} is not a UTF-8 text file", {"uri": str(uri)}) from None
        edited, count = replace_exact(text, old, new, replace_all=replace_all)
        op = BatchOperation(uri, content=edited, expected_sha256=hashlib.sha256(raw).hexdigest())
        parent = uri.parent or uri
        result = self.content.batch_write(
            identity,
            parent,
            [op],
            wait=wait,
            skip_conflicts=False,
            defer_processing=False,
            processing_mode="semantic_and_vectors",
        )
        written = result.results[0]
        # Without skip_conflicts a batch either refuses or writes every item, sizes and hashes.
        assert written.written_bytes is not None and written.sha256 is not None
        return Edited(
            str(uri),
            count,
            written.written_bytes,
            written.sha256,
            result.task_id,
            result.semantic_status,
        )

    def remember(
        self, identity: Identity, messages: list[NewMessage], session_id: str | None = None
    ) -> Remembered:
        """Appends the messages to a session (a new one unless given) and commits it: the
        archive is written now, memories are extracted in the background (`task_id`)."""
        if not messages:
            raise InvalidArgument("messages must not be empty")
        if session_id is None:
            session_id = self.sessions.create(identity).session_id
        _, stored = self.sessions.add_messages(identity, session_id, messages)
        commit = self.sessions.commit(identity, session_id)
        return Remembered(
            **{**asdict(commit), "session_id": session_id},
            messages_added=len(stored),
            message_ids=[m.message_id for m in stored],
        )

    def add_text(
        self,
        identity: Identity,
        name: str,
        text: str,
        *,
        to: str | None = None,
        parent: str | None = None,
        tags: list[str] | None = None,
        wait: bool = False,
    ) -> Added:
        """Adds inline text as a resource file named `name`, as an upload of that file would."""
        if not text:
            raise InvalidArgument("content must not be empty")
        temp_id = self.resources.temp_upload(identity, name, text.encode("utf-8"))
        req = AddResourceRequest(
            temp_file_id=temp_id, to=to, parent=parent, source_name=name, tags=tags
        )
        try:
            return self.content.add_resource(
                identity, req, wait=wait, processing_mode="semantic_and_vectors"
            )
        except SkaldError:
            self.resources.discard_upload(identity, temp_id)
            raise

    def add_url(
        self,
        identity: Identity,
        url: str,
        *,
        to: str | None = None,
        parent: str | None = None,
        wait: bool = False,
    ) -> Added:
        """Adds a web page or a git repository: the fetch worker downloads it (`task_id`)."""
        if not is_remote(url):
            raise InvalidArgument(
                "url must be an http(s) page or a git repository URL", {"url": url}
            )
        req = AddResourceRequest(path=url, to=to, parent=parent)
        return self.content.add_resource(
            identity, req, wait=wait, processing_mode="semantic_and_vectors"
        )
