"""A populated api_key-mode server for isolation tests: two accounts with an admin and two
users each ("alice" in both), every one with a private file, a file in a peer's subtree, a
session (two of them committed: archives, extracted memories), an unused upload and tasks, and
a shared file per account, all carrying unique marker strings.

Markers come in two kinds. A *content* marker is text inside a file or a message: no request
ever contains one, so it must never appear in a response the owner's data is invisible to. A
*name* marker is part of a URI, a session id, a task id or a temp_file_id: requests may name
it (and an error may echo it back), so it must only stay out of responses to requests that
did not mention it.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

PEERS = ("p1", "p2")
# Every private file holds these words, so that one generic query matches all of them.
COMMON_WORDS = "zebra quantum ledger"
COMMITTERS = {(True, "bob"), (False, "alice")}  # (in the first account, user id)


@dataclass(frozen=True)
class Principal:
    account: str
    user: str
    role: str  # admin | user
    key: str


@dataclass(frozen=True)
class Secret:
    account: str
    user: str | None  # None: shared with the whole account (viking://resources)
    peer: str | None
    text: str
    nameable: bool  # may appear in a request, then its echo is no leak


@dataclass
class Owned:
    """What one principal created: the handles the tests aim at."""

    files: list[str] = field(default_factory=list)  # canonical file URIs
    dirs: list[str] = field(default_factory=list)
    session_id: str = ""
    task_ids: list[str] = field(default_factory=list)
    upload_id: str = ""


@dataclass
class World:
    url: str
    root_key: str
    principals: list[Principal]
    secrets: list[Secret]
    owned: dict[Principal, Owned]

    def visible(
        self, who: Principal, peer: str | None, secret: Secret, *, peers_shown: bool = False
    ) -> bool:
        """The rule the server must follow. `peers_shown`: the route sweeps every peer of the
        caller's space on purpose (context mode with peer_scope=all)."""
        if secret.account != who.account:
            return False
        if secret.user is not None and secret.user != who.user and who.role != "admin":
            return False
        return secret.peer is None or peer is None or secret.peer == peer or peers_shown

    def leaks(
        self,
        who: Principal,
        peer: str | None,
        request: str,
        response: str,
        *,
        peers_shown: bool = False,
    ) -> list[Secret]:
        hidden = [
            s for s in self.secrets if not self.visible(who, peer, s, peers_shown=peers_shown)
        ]
        # The same user id in two accounts gives two equal user-root URIs.
        shown = {s.text for s in self.secrets if s not in hidden} | {user_root(who.user)}
        return [
            s
            for s in hidden
            if s.text not in shown
            and _occurs(s.text, response)
            and not (s.nameable and s.text in request)
        ]


def user_root(user: str) -> str:
    return f"viking://user/{user}"


def _occurs(text: str, response: str) -> bool:
    if not text.startswith("viking://"):
        return text in response
    # a user root: not as the prefix of a longer user id
    return re.search(re.escape(text) + r"(?![a-zA-Z0-9_.@-])", response) is not None


def token(kind: str) -> str:
    return f"{kind}{uuid.uuid4().hex[:16]}"


def headers(key: str, peer: str | None = None) -> dict[str, str]:
    out = {"X-API-Key": key}
    if peer is not None:
        out["X-OpenViking-Actor-Peer"] = peer
    return out


def _ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, (resp.request.url, resp.status_code, resp.text)
    return resp.json().get("result")


def build_world(url: str, root_key: str) -> World:
    http = httpx.Client(base_url=url, timeout=120)
    principals: list[Principal] = []
    for label, admin, users in (
        ("iso-a", "boss", ("alice", "bob")),
        ("iso-b", "chief", ("alice", "erin")),
    ):
        account = f"{label}-{uuid.uuid4().hex[:8]}"
        res = _ok(
            http.post(
                "/api/v1/admin/accounts",
                headers=headers(root_key),
                json={"account_id": account, "admin_user_id": admin},
            )
        )
        principals.append(Principal(account, admin, "admin", res["user_key"]))
        for user in users:
            res = _ok(
                http.post(
                    f"/api/v1/admin/accounts/{account}/users",
                    headers=headers(root_key),
                    json={"user_id": user, "role": "user"},
                )
            )
            principals.append(Principal(account, user, "user", res["user_key"]))
    world = World(url, root_key, principals, [], {p: Owned() for p in principals})
    shared_done: set[str] = set()
    for p in principals:
        _populate(http, world, p, shared=p.account not in shared_done)
        shared_done.add(p.account)
    wait = http.post("/api/v1/system/wait", headers=headers(root_key), params={"timeout": 120})
    assert wait.status_code == 200, wait.text
    http.close()
    return world


def _populate(http: httpx.Client, world: World, p: Principal, *, shared: bool) -> None:
    h = headers(p.key)
    own = world.owned[p]
    secrets = world.secrets

    def secret(
        text: str, nameable: bool, peer: str | None = None, user: str | None = p.user
    ) -> str:
        secrets.append(Secret(p.account, user, peer, text, nameable))
        return text

    def write(uri: str, peer: str | None = None) -> None:
        content = secret(token("ct"), False, peer)
        res = _ok(
            http.post(
                "/api/v1/content/write",
                headers=h,
                json={"uri": uri, "content": f"# Notes\n\n{COMMON_WORDS} {content}.\n"},
            )
        )
        own.task_ids.append(secret(res["task_id"], True, peer))
        canonical = uri.replace("viking://~/", f"viking://user/{p.user}/")
        own.files.append(canonical)
        own.dirs.append(canonical.rsplit("/", 1)[0])

    secrets.append(Secret(p.account, p.user, None, user_root(p.user), True))
    write(f"viking://~/resources/{secret(token('nm'), True)}/doc.md")
    # With actor peer p1, p2's subtree is hidden; p2 sees it.
    peer = PEERS[1]
    write(f"viking://~/peers/{peer}/memories/{secret(token('nm'), True, peer)}.md", peer)
    if shared:
        name = secret(token("nm"), True, user=None)
        content = secret(token("ct"), False, user=None)
        _ok(
            http.post(
                "/api/v1/content/write",
                headers=h,
                json={
                    "uri": f"viking://resources/{name}.md",
                    "content": f"{COMMON_WORDS} {content}",
                },
            )
        )

    sid = own.session_id = secret(token("nm"), True)
    _ok(http.post("/api/v1/sessions", headers=h, json={"session_id": sid}))
    said = secret(token("ct"), False)
    _ok(
        http.post(
            f"/api/v1/sessions/{sid}/messages",
            headers=h,
            json={"role": "user", "content": f"I prefer {COMMON_WORDS} {said} for every report."},
        )
    )
    if (p.account.startswith("iso-a"), p.user) in COMMITTERS:
        # Extraction is the slow part of the world: two commits cover archives, extracted
        # memories and commit tasks, inside one account and across accounts.
        res = _ok(http.post(f"/api/v1/sessions/{sid}/commit", headers=h, json={}))
        own.task_ids.append(secret(res["task_id"], True))

    uploaded = secret(token("ct"), False)
    res = _ok(
        http.post(
            "/api/v1/resources/temp_upload",
            headers=h,
            files={"file": (f"{token('up')}.md", f"{COMMON_WORDS} {uploaded}")},
        )
    )
    own.upload_id = secret(res["temp_file_id"], True)
