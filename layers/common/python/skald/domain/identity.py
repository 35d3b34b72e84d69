"""Who is calling: account > user > peer, and the role that decides what they may reach."""

from __future__ import annotations

from dataclasses import dataclass

from skald.domain.errors import InvalidArgument, PermissionDenied
from skald.domain.uri import VikingURI, validate_identifier
from skald.domain.visibility import view_of

ROLES = ("root", "admin", "user")


@dataclass(frozen=True)
class Identity:
    account_id: str
    user_id: str
    role: str  # root | admin | user
    actor_peer: str | None = None
    dev_mode: bool = False  # no keys configured: loopback only, acts as root
    # The API key the call came with (its public id, never the key): audit records name it.
    key_id: str | None = None
    # The user's incarnation: a user registered again under a removed user's id has another,
    # so work queued for the removed one is never done for the new one. None: no user row
    # (dev mode, the root key).
    generation: str | None = None

    @property
    def privileged(self) -> bool:
        """Root (and dev mode) may name any user space literally."""
        return self.role == "root"

    @property
    def user_root(self) -> VikingURI:
        return VikingURI("user", (self.user_id,))


def parse_actor_peer(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if "/" in value or "\\" in value:
        raise InvalidArgument("X-OpenViking-Actor-Peer must not contain '/' or '\\'")
    return validate_identifier(value, "peer id")


def check_access(identity: Identity, uri: VikingURI, *, write: bool) -> None:
    """Reads: what domain/visibility.py makes visible (a user: their own user space, shared
    resources, the agent space and `system`; admins and root: every user space). Writes:
    users write their own user space, resources and the agent space; `system` is read-only
    except for root."""
    if not write:
        view_of(identity).check_reaches(uri)
        return
    if identity.role in {"root", "admin"}:
        if uri.scope == "system" and identity.role != "root":
            raise PermissionDenied(f"{uri} is read-only")
        return
    if uri.scope == "user" and uri.parts and uri.parts[0] != identity.user_id:
        raise PermissionDenied(f"Access to {uri} is not allowed", {"uri": str(uri)})
    if uri.scope == "user" and not uri.parts:
        raise PermissionDenied(f"{uri} is not writable", {"uri": str(uri)})
    if uri.scope == "system":
        raise PermissionDenied(f"{uri} is read-only", {"uri": str(uri)})
    if uri.is_root:
        raise PermissionDenied("viking:// is not writable", {"uri": str(uri)})


def peer_visible(identity: Identity, uri: VikingURI) -> bool:
    """With an actor peer, other peers' subtrees are hidden."""
    return view_of(identity).peer_allows(uri)
