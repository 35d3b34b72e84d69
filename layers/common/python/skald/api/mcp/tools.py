"""The MCP tools. Each docstring is the description an agent reads to decide WHEN to call the
tool; each parameter's `Field` is its input schema. A tool resolves the caller (the identity the
endpoint admitted), calls the same services the HTTP routers call, in a worker thread, and
answers text for the model plus the full result as `structuredContent`. A Skald error comes
back as a tool error (`isError`) carrying its code, message and details."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from skald import __version__
from skald.api.deps import admit_data, uri_of
from skald.api.envelope import to_wire
from skald.compose.composition import Composition
from skald.domain.access.identity import Identity
from skald.domain.errors import InvalidArgument, SkaldError, Unauthenticated
from skald.services.context.service import ContextRequest
from skald.services.fs.browse import ListOptions
from skald.services.fs.results import Listing
from skald.services.ingest.results import Added
from skald.services.retrieval.matching import GlobRequest, GrepRequest
from skald.services.retrieval.service import FindRequest
from skald.services.sessions.service import NewMessage
from skald.services.skills.agent import AgentService

from . import render

log = logging.getLogger("skald.mcp")

MAX_READ_URIS = 20

Uri = Annotated[
    str,
    Field(
        description="A viking:// URI, e.g. viking://resources/docs/setup.md "
        "or viking://~/memories (~ is your own user space)."
    ),
]
Query = Annotated[
    str, Field(min_length=1, description="What you are looking for, in natural language.")
]
Target = Annotated[
    str,
    Field(
        description="Only search below this viking:// URI. Empty: your "
        "memories, the shared resources and the skills."
    ),
]
Limit = Annotated[int, Field(ge=1, le=100, description="Maximum number of hits.")]
SearchType = Annotated[
    Literal["hybrid", "semantic", "keywords"],
    Field(
        description="hybrid (meaning + keywords, the default), semantic (meaning only) or keywords "
        "(exact words, BM25)."
    ),
]
Wait = Annotated[
    bool,
    Field(
        description="Wait until the content is summarised and indexed "
        "before answering (slower; find sees it at once)."
    ),
]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"] = Field(description="Who said it.")
    content: str = Field(min_length=1, description="What was said, verbatim.")


def ok(result: Any, text: str) -> CallToolResult:
    result = to_wire(result)
    structured = result if isinstance(result, dict) else {"result": result}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def wire_json(result: Any) -> str:
    """A typed result's text: its JSON as the route answers it."""
    return render.as_json(to_wire(result))


def failed(code: str, message: str, details: dict[str, Any] | None = None) -> CallToolResult:
    error = {"code": code, "message": message, "details": details or {}}
    return CallToolResult(
        content=[TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"error": error},
        is_error=True,
    )


class SkaldTools:
    """One instance per server: the tools close over the container, the caller comes with each
    request."""

    def __init__(self, container: Composition) -> None:
        self.c = container

    @cached_property
    def agent(self) -> AgentService:
        # On first use: building the services at cold start would build their adapters too.
        c = self.c
        return AgentService(c.fs, c.content, c.resources, c.sessions)

    def catalog(self) -> list[tuple[str, Callable[..., Any], str]]:
        """(name, function, kind): kind is read, write or delete, for the tool annotations."""
        return [
            ("find", self.find, "read"),
            ("search", self.search, "read"),
            ("read", self.read, "read"),
            ("list", self.ls, "read"),
            ("tree", self.tree, "read"),
            ("grep", self.grep, "read"),
            ("glob", self.glob, "read"),
            ("stat", self.stat, "read"),
            ("write", self.write, "write"),
            ("edit", self.edit, "write"),
            ("remember", self.remember, "write"),
            ("forget", self.forget, "delete"),
            ("add_resource", self.add_resource, "write"),
            ("health", self.health, "read"),
        ]

    # ---------------------------------------------------------------- plumbing

    async def _run(
        self,
        ctx: Context,
        work: Callable[[Identity], Any],
        text: Callable[[Any], str],
        *,
        data: bool = True,
    ) -> CallToolResult:
        try:
            identity = await self._identity(ctx, data)
            result = await run_in_threadpool(work, identity)
            return ok(result, text(result))
        except SkaldError as exc:
            return failed(exc.code, exc.message, exc.details)
        except Exception:  # a bug must not crash the transport or leak internals
            log.exception("MCP tool failed")
            return failed("INTERNAL", "Internal error")

    async def _identity(self, ctx: Context, data: bool) -> Identity:
        request = ctx.request_context.request
        identity = (
            getattr(request.state, "identity", None) if isinstance(request, Request) else None
        )
        if not isinstance(identity, Identity):  # only the /mcp endpoint admits callers
            raise Unauthenticated("No caller identity on this MCP request")
        if data:
            await admit_data(self.c, identity)
        return identity

    # ---------------------------------------------------------------- retrieval

    async def find(
        self,
        ctx: Context,
        query: Query,
        target_uri: Target = "",
        limit: Limit = 10,
        context_type: Annotated[
            Literal["memory", "resource", "skill"] | None,
            Field(description="Only this kind of context."),
        ] = None,
        search_type: SearchType = "hybrid",
        score_threshold: Annotated[
            float | None, Field(ge=0, le=1, description="Drop hits scoring below this.")
        ] = None,
    ) -> CallToolResult:
        """Look something up in the context database by meaning: memories about the user
        (preferences, profile, past events), shared resources (documents, code) and skills,
        ranked by relevance. Use it FIRST whenever the answer may depend on something stored
        earlier and you do not know its exact URI. Returns URIs with one-line abstracts; call
        read on a URI for the full text. For an exact string use grep, for file names glob."""
        req = FindRequest(
            query=query,
            target_uri=[target_uri] if target_uri else [],
            context_type=[context_type] if context_type else None,
            limit=limit,
            score_threshold=score_threshold,
            search_type=search_type,
        )
        return await self._run(ctx, lambda i: self.c.retrieval.find(i, req), render.hits)

    async def search(
        self,
        ctx: Context,
        query: Query,
        target_uri: Target = "",
        session_id: Annotated[
            str | None,
            Field(
                description="The current conversation's session: its recent messages "
                "sharpen the query."
            ),
        ] = None,
        limit: Limit = 10,
        search_type: SearchType = "hybrid",
        mode: Annotated[
            Literal["list", "context"],
            Field(
                description="list: ranked hits like find. context: one ready-to-use "
                "block of the most relevant memories and resources that "
                "fits max_tokens."
            ),
        ] = "list",
        max_tokens: Annotated[
            int | None,
            Field(
                ge=64,
                le=32000,
                description="Token budget of the context block (mode=context only; default 1600).",
            ),
        ] = None,
        purpose: Annotated[
            Literal["chat", "coding"] | None,
            Field(
                description="What the context is for; shifts the mix between "
                "memories and resources (mode=context only)."
            ),
        ] = None,
    ) -> CallToolResult:
        """Deeper retrieval than find: plans several queries from your question (and from the
        conversation when session_id is given). Use mode=context at the start of a task or a
        reply to load, within a token budget, what is known about the user and the topic as one
        block you can rely on directly; use mode=list (or find) for a ranked list of URIs."""
        if mode == "list" and (max_tokens is not None or purpose is not None):
            return failed(
                "INVALID_ARGUMENT", "max_tokens and purpose are only valid with mode='context'"
            )
        if mode == "context" and target_uri:
            return failed("INVALID_ARGUMENT", "target_uri is not accepted in context mode")
        base = FindRequest(
            query=query,
            target_uri=[target_uri] if target_uri else [],
            limit=limit,
            search_type=search_type,
            session_id=session_id,
        )
        if mode == "list":
            return await self._run(ctx, lambda i: self.c.retrieval.search(i, base), render.hits)
        provided = {"max_tokens"} if max_tokens is not None else set()
        creq = ContextRequest(
            base=base,
            max_tokens=max_tokens or 1600,
            purpose=purpose,
            provided=frozenset(provided | ({"purpose"} if purpose else set())),
        )
        return await self._run(ctx, lambda i: self.c.context.assemble(i, creq), render.context)

    # ---------------------------------------------------------------- browsing

    async def read(
        self,
        ctx: Context,
        uris: Annotated[
            str | list[str],
            Field(
                description="One viking:// file URI, or a list of up to 20 to read them "
                "in one call."
            ),
        ],
        offset: Annotated[int, Field(ge=0, description="First line to return (0-based).")] = 0,
        limit: Annotated[int, Field(ge=-1, description="Number of lines; -1 for all.")] = -1,
    ) -> CallToolResult:
        """Read the full text of files by viking:// URI: the URIs find, search, list, grep or
        glob gave you. Pass several URIs to read them together; a URI that cannot be read is
        reported in its own section. For a directory use list (entries) instead."""
        many = isinstance(uris, list)
        wanted = uris if isinstance(uris, list) else [uris]
        if not wanted or len(wanted) > MAX_READ_URIS:
            return failed("INVALID_ARGUMENT", f"Pass between 1 and {MAX_READ_URIS} URIs")

        def one(identity: Identity, raw: str) -> str:
            return self.c.fs.read_text(identity, uri_of(identity, raw), offset=offset, limit=limit)

        if not many:
            return await self._run(ctx, lambda i: one(i, wanted[0]), str)

        def each(identity: Identity) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for raw in wanted:
                try:
                    out.append({"uri": raw, "content": one(identity, raw)})
                except SkaldError as exc:
                    out.append({"uri": raw, "error": {"code": exc.code, "message": exc.message}})
            if all("error" in r for r in out):
                first = out[0]["error"]
                raise _Failed(first["code"], f"No URI could be read; first: {first['message']}")
            return out

        def text(results: list[dict[str, Any]]) -> str:
            return render.reads(
                [
                    (
                        r["uri"],
                        r.get("content"),
                        None
                        if "content" in r
                        else f"{r['error']['code']}: {r['error']['message']}",
                    )
                    for r in results
                ]
            )

        return await self._run(ctx, each, text)

    async def ls(
        self,
        ctx: Context,
        uri: Uri = "viking://",
        recursive: Annotated[bool, Field(description="List the whole subtree.")] = False,
        limit: Annotated[int, Field(ge=1, le=1000, description="Maximum entries.")] = 200,
    ) -> CallToolResult:
        """List the entries of a viking:// directory with their one-line abstracts. Use it to
        browse what is stored: viking://resources (shared documents and code), viking://~/
        memories (what is remembered about the user), viking://agent/skills. recursive=true
        lists the whole subtree; tree shows it nested with a depth limit."""
        opts = ListOptions(recursive=recursive, node_limit=limit, rel_paths=recursive)
        return await self._run(ctx, lambda i: self._entries(i, uri, opts), render.entries)

    async def tree(
        self,
        ctx: Context,
        uri: Uri = "viking://",
        level_limit: Annotated[int, Field(ge=1, le=10, description="Depth to descend.")] = 3,
        directories_only: bool = False,
        limit: Annotated[int, Field(ge=1, le=1000, description="Maximum entries.")] = 500,
    ) -> CallToolResult:
        """Show a viking:// subtree down to level_limit levels, with abstracts: a quick map of
        a resource or of the memory folders before reading files."""
        opts = ListOptions(
            level_limit=level_limit,
            directories_only=directories_only,
            node_limit=limit,
            rel_paths=True,
        )
        return await self._run(ctx, lambda i: self._entries(i, uri, opts), render.entries)

    def _entries(self, identity: Identity, uri: str, opts: ListOptions) -> Listing:
        return self.c.browse.list_entries(identity, uri_of(identity, uri), opts)

    async def grep(
        self,
        ctx: Context,
        pattern: Annotated[
            str,
            Field(min_length=1, description="A regular expression (RE2 syntax) matched per line."),
        ],
        uri: Uri = "viking://",
        case_insensitive: bool = False,
        limit: Annotated[int, Field(ge=1, le=1000, description="Maximum matching lines.")] = 100,
    ) -> CallToolResult:
        """Find exact text in stored files: a name, an identifier, an error message, a phrase.
        Returns matching lines with their file URI and line number. Use find or search for
        meaning, glob for file names."""
        req = GrepRequest(
            uri=uri, pattern=pattern, case_insensitive=case_insensitive, node_limit=limit
        )
        return await self._run(ctx, lambda i: self.c.matching.grep(i, req), render.grep)

    async def glob(
        self,
        ctx: Context,
        pattern: Annotated[
            str, Field(min_length=1, description="A path pattern, e.g. **/*.md or docs/*.py.")
        ],
        uri: Uri = "viking://",
        limit: Annotated[int, Field(ge=1, le=1000, description="Maximum matches.")] = 200,
    ) -> CallToolResult:
        """Find stored files by name or path pattern (** crosses directories). Use it when you
        know what a file is called, not what it says."""
        req = GlobRequest(pattern=pattern, uri=uri, node_limit=limit)
        return await self._run(ctx, lambda i: self.c.matching.glob(i, req), render.glob)

    async def stat(self, ctx: Context, uri: Uri) -> CallToolResult:
        """Check whether a viking:// URI exists and get its metadata (file or directory, size,
        modification time, number of entries) without reading it."""
        return await self._run(ctx, lambda i: self.c.browse.stat(i, uri_of(i, uri)), wire_json)

    # ---------------------------------------------------------------- changes

    async def write(
        self,
        ctx: Context,
        uri: Uri,
        content: Annotated[str, Field(description="The full text of the file.")],
        mode: Annotated[
            Literal["replace", "append", "create"],
            Field(
                description="replace (default) overwrites, append adds to the end, "
                "create refuses to overwrite an existing file."
            ),
        ] = "replace",
        wait: Wait = False,
    ) -> CallToolResult:
        """Create or overwrite a text file at a viking:// URI (missing parent directories are
        created). The file is summarised and indexed in the background. To change part of an
        existing file use edit; to add a new document to the shared knowledge base use
        add_resource."""
        return await self._run(
            ctx,
            lambda i: self.c.content.write(
                i,
                uri_of(i, uri),
                content,
                mode=mode,
                wait=wait,
                processing_mode="semantic_and_vectors",
                tags=None,
                tag_mode="replace",
            ),
            wire_json,
        )

    async def edit(
        self,
        ctx: Context,
        uri: Uri,
        old_string: Annotated[
            str,
            Field(min_length=1, description="Exact text to replace, as read, whitespace included."),
        ],
        new_string: Annotated[str, Field(description="The replacement text.")],
        replace_all: Annotated[
            bool,
            Field(
                description="Replace every occurrence; "
                "otherwise old_string must occur exactly "
                "once."
            ),
        ] = False,
        wait: Wait = False,
    ) -> CallToolResult:
        """Change part of an existing text file by exact string replacement: read the file
        first, then pass the exact text to replace. old_string must occur exactly once (add
        surrounding lines to make it unique) unless replace_all is set. Fails without writing
        if the file changed since it was read."""
        return await self._run(
            ctx,
            lambda i: self.agent.edit(
                i, uri_of(i, uri), old_string, new_string, replace_all=replace_all, wait=wait
            ),
            render.as_json,
        )

    async def remember(
        self,
        ctx: Context,
        messages: Annotated[
            list[Message],
            Field(
                min_length=1,
                max_length=100,
                description="The exchange to remember, e.g. [{role: user, content: "
                "'I prefer tabs over spaces'}]. Keep the user's own "
                "words.",
            ),
        ],
        session_id: Annotated[
            str | None, Field(description="Add to this session instead of a new one.")
        ] = None,
    ) -> CallToolResult:
        """Store something in long-term memory: when the user shares a preference, a fact about
        themselves or their work, a decision, or asks you to remember something. The messages
        are added to a session and committed; memories are extracted in the background and can
        be found with find once the returned task_id has completed."""
        new = [NewMessage(m.role, m.content) for m in messages]
        return await self._run(
            ctx, lambda i: self.agent.remember(i, new, session_id), render.as_json
        )

    async def forget(
        self,
        ctx: Context,
        uri: Uri,
        recursive: Annotated[
            bool, Field(description="Required to delete a directory and everything in it.")
        ] = False,
    ) -> CallToolResult:
        """Permanently delete a memory or a resource by viking:// URI (find its URI first with
        find or list). Irreversible: use it only when the user asks to forget or delete
        something, or a stored fact is wrong and must go."""
        return await self._run(
            ctx,
            lambda i: self.c.content.rm(i, uri_of(i, uri), recursive=recursive, wait=False),
            wire_json,
        )

    async def add_resource(
        self,
        ctx: Context,
        name: Annotated[
            str | None,
            Field(
                min_length=1,
                description="File name of inline content, e.g. "
                "deploy-notes.md; its extension tells the kind of text.",
            ),
        ] = None,
        content: Annotated[
            str | None, Field(min_length=1, description="The document's text (with name).")
        ] = None,
        url: Annotated[
            str | None,
            Field(
                min_length=1,
                description="Instead of name and content: a web "
                "page (http/https) or a git repository URL (GitHub, GitLab, "
                "any https git URL) to fetch.",
            ),
        ] = None,
        to: Annotated[
            str | None, Field(description="Exact target directory below viking://resources.")
        ] = None,
        parent: Annotated[
            str | None, Field(description="Existing directory to add the resource in.")
        ] = None,
        wait: Wait = False,
    ) -> CallToolResult:
        """Add a document to the shared knowledge base so that it can be found later by find
        and search: inline text (name + content: Markdown, code, notes), or a web page or git
        repository by url (fetched in the background; a repository lands under
        viking://resources/<owner>/<repo>/). It is stored under viking://resources (or `to`),
        summarised and indexed. Use it for material worth keeping for every future task; use
        write for a file at a URI you choose and remember for facts about the user."""

        def work(i: Identity) -> Added:
            if url is not None:
                if name is not None or content is not None:
                    raise InvalidArgument("give either url, or name and content, not both")
                return self.agent.add_url(i, url, to=to, parent=parent, wait=wait)
            if name is None or content is None:
                raise InvalidArgument("give name and content (inline text), or url")
            return self.agent.add_text(i, name, content, to=to, parent=parent, wait=wait)

        return await self._run(ctx, work, wire_json)

    async def health(self, ctx: Context) -> CallToolResult:
        """Check that Skald is reachable and which account and user you are connected as, with
        the readiness of its storage, index and queues."""

        def work(identity: Identity) -> dict[str, Any]:
            return {
                "healthy": True,
                "version": __version__,
                "auth_mode": self.c.accounts.auth_mode,
                "account_id": identity.account_id,
                "user_id": identity.user_id,
                "role": identity.role,
                "checks": self.c.readiness(),
            }

        return await self._run(ctx, work, render.as_json, data=False)


class _Failed(SkaldError):
    """A failure whose code is decided at run time (all URIs of a read failed)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
