"""Who is calling: account > user > peer, and the role that decides what they may reach."""

from __future__ import annotations

from dataclasses import dataclass

from skald.domain.errors import InvalidArgument
from skald.domain.paths.uri import VikingURI, validate_identifier

ROLES = ("root", "admin", "user")
# The root key's own account: no tenant's (account ids never start with `_`).
ROOT_ACCOUNT = "_root"


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
