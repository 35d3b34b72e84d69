"""What an identity may read inside its account: the one place visibility is decided.

An identity sees a set of **visible roots**. A user sees their own user space, the shared
`viking://resources`, the agent space (`viking://agent`: skills and the like) and `system`
(read-only); admins and root see every public scope of the account. An actor peer hides the
other peers' subtrees (`viking://user/<uid>/peers/<other>`) wherever they are.

Every read path goes through a `View`:
- `reaches(uri)`: may `uri` be named as a read target? Its own content is visible, or it is a
  container on the way to a visible root (`viking://`, `viking://user`), which lists only
  what is visible.
- `narrow(uri)`: a requested scope intersected with the visible roots (`viking://user` ->
  `viking://user/<self>`, `viking://` -> every visible root); empty when nothing is visible.
- `allows(uri)` / `shows(uri)`: may this record or listing entry be returned?

Tasks and uploads belong to a user: `sees_user` says whose records an identity may see.
Directories that span owners (`spans_owners`) never summarise their children.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skald.domain.access.identity import Identity
from skald.domain.errors import PermissionDenied
from skald.domain.paths.uri import VikingURI, classify_uri

SHARED_ROOTS = (VikingURI("agent"), VikingURI("resources"), VikingURI("system"))
ACCOUNT_ROOTS = (*SHARED_ROOTS, VikingURI("user"))


def manages_account(identity: Identity) -> bool:
    """Admins (and root, dev mode included) reach every user of their account."""
    return identity.role in {"root", "admin"}


def visible_roots(identity: Identity) -> tuple[VikingURI, ...]:
    if manages_account(identity):
        return ACCOUNT_ROOTS
    return (*SHARED_ROOTS, VikingURI("user", (identity.user_id,)))


def sees_user(identity: Identity, account_id: str, user_id: str) -> bool:
    """May `identity` see what `user_id` of `account_id` owns (tasks, sessions)? Root of
    api_key mode spans accounts; admins see their account; users only themselves."""
    if identity.role == "root" and not identity.dev_mode:
        return True
    if account_id != identity.account_id:
        return False
    return manages_account(identity) or user_id == identity.user_id


@dataclass(frozen=True)
class View:
    roots: tuple[VikingURI, ...]
    actor_peer: str | None = None

    def peer_allows(self, uri: VikingURI) -> bool:
        """With an actor peer, other peers' subtrees are hidden."""
        if self.actor_peer is None:
            return True
        peer = classify_uri(uri).peer
        return peer is None or peer == self.actor_peer

    def within_roots(self, uri: VikingURI) -> bool:
        return any(uri.is_within(root) for root in self.roots)

    def allows(self, uri: VikingURI) -> bool:
        """May a record at `uri` (a file, a sidecar, a hit) be returned?"""
        return self.within_roots(uri) and self.peer_allows(uri)

    def above_roots(self, uri: VikingURI) -> bool:
        """Is `uri` a container strictly above a visible root (`viking://`, `viking://user`)?"""
        return any(root.is_within(uri) and root != uri for root in self.roots)

    def reaches(self, uri: VikingURI) -> bool:
        """May `uri` be named as a read target (peer hiding aside: that is a 404)?"""
        return self.within_roots(uri) or self.above_roots(uri)

    def shows(self, uri: VikingURI) -> bool:
        """May a listing show the entry `uri`?"""
        return self.reaches(uri) and self.peer_allows(uri)

    def narrow(self, uri: VikingURI) -> tuple[VikingURI, ...]:
        """The visible part of `uri`'s subtree, as scopes that together cover exactly it."""
        if self.within_roots(uri):
            return (uri,)
        return tuple(root for root in self.roots if root.is_within(uri))

    def check_reaches(self, uri: VikingURI) -> None:
        if not self.reaches(uri):
            raise PermissionDenied(f"Access to {uri} is not allowed", {"uri": str(uri)})

    def scopes(self, targets: Sequence[VikingURI]) -> list[VikingURI]:
        """Requested scopes intersected with the visible roots, without duplicates. A target of
        which nothing is visible is refused, as naming it anywhere else would be."""
        out: list[VikingURI] = []
        for target in targets:
            self.check_reaches(target)
            for scope in self.narrow(target):
                if scope not in out:
                    out.append(scope)
        if not out:  # to an index, no scope at all would mean the whole account
            raise PermissionDenied("Nothing to search in")
        return out


def spans_owners(uri: VikingURI) -> bool:
    """A directory whose children belong to different users or peers: `viking://`,
    `viking://user` and a user's `peers` collection. Its summary must not gather its
    children's, or anyone who may read the directory would read theirs."""
    parts = uri.parts
    return (
        uri.is_root
        or uri.scope == "user"
        and (not parts or len(parts) == 2 and parts[1] == "peers")
    )


def view_of(identity: Identity) -> View:
    return View(visible_roots(identity), identity.actor_peer)


def search_scopes(identity: Identity, targets: Sequence[VikingURI]) -> list[VikingURI]:
    """The index scopes of find and search: the targets narrowed to the caller's view; with
    no target, the caller's user space, shared resources and the agent's skills. An index
    filter takes its scopes from here and nowhere else."""
    default = [identity.user_root, VikingURI("resources"), VikingURI("agent", ("skills",))]
    return view_of(identity).scopes(list(targets) or default)


def check_access(identity: Identity, uri: VikingURI, *, write: bool) -> None:
    """Reads: what this module makes visible (a user: their own user space, shared
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
