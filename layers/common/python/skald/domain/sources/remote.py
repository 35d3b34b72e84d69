"""Remote sources: what an `add_resource` path names (a web page or a git repository), and
where it lands.

As in OpenViking, a repository on a code host lands under `viking://resources/<owner>/<repo>`
(each part kept to letters, digits, `-` and `_`); a page under `viking://resources/<name>`,
its name from the URL's last path segment (else its host). A repository URL may name a branch
or tag and a subpath the way the forges' own pages do (`/tree/<ref>/<path>`,
`/-/tree/<ref>/<path>`); an `ssh` form on a known forge is fetched over https (an ssh
connection could not be held to the address rules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from skald.domain.errors import InvalidArgument

GITHUB_HOSTS = frozenset({"github.com", "www.github.com"})
GITLAB_HOSTS = frozenset({"gitlab.com", "www.gitlab.com"})
FORGE_HOSTS = GITHUB_HOSTS | GITLAB_HOSTS
REMOTE_PREFIXES = ("http://", "https://", "git@", "ssh://", "git://")
_SSH = re.compile(r"^(?:ssh://)?git@(?P<host>[\w.-]+)[:/](?P<path>.+)$")


@dataclass(frozen=True)
class RemoteSource:
    kind: str  # "page" | "git"
    url: str  # what is fetched (http or https)
    name: str  # the root's last segment
    owner: str | None = None  # git: the namespace the root sits in
    ref: str | None = None  # git: branch or tag (None: the default branch)
    subpath: str = ""  # git: only this folder of the repository

    @property
    def root_parts(self) -> tuple[str, ...]:
        """The root's path below viking://resources."""
        return (self.owner, self.name) if self.owner else (self.name,)


def is_remote(path: str) -> bool:
    return path.lower().startswith(REMOTE_PREFIXES)


def sanitize(part: str) -> str:
    """A path segment in OpenViking's naming rule: letters, digits, `-`, `_`; others `_`."""
    clean = "".join(c if c.isalnum() or c in "-_" else "_" for c in part)
    return clean.strip("_") or "resource"


def parse_source(path: str) -> RemoteSource:
    """The source `path` names; InvalidArgument for a scheme or form that is not fetched."""
    text = path.strip()
    ssh = _SSH.match(text)
    if ssh:
        host = ssh.group("host").lower()
        if host not in FORGE_HOSTS:
            raise InvalidArgument(
                "SSH git URLs are fetched only for GitHub and GitLab; "
                "use the repository's https URL",
                {"path": path},
            )
        text = f"https://{host}/{ssh.group('path')}"
    if text.lower().startswith("git://"):
        raise InvalidArgument(
            "git:// URLs are not fetched (unauthenticated, unencrypted); "
            "use the repository's https URL",
            {"path": path},
        )
    try:
        parts = urlsplit(text)
    except ValueError:
        raise InvalidArgument(f"Not a fetchable URL: {path}", {"path": path}) from None
    if parts.scheme.lower() not in {"http", "https"} or not parts.hostname:
        raise InvalidArgument(f"Not a fetchable URL: {path}", {"path": path})
    if parts.username or parts.password:
        raise InvalidArgument("URLs with credentials are not fetched", {"path": path})
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise InvalidArgument(f"Invalid port in {path}", {"path": path}) from None
    host = parts.hostname.lower()
    segs = [unquote(s) for s in parts.path.split("/") if s]
    if host in FORGE_HOSTS and len(segs) >= 2:
        return _forge_source(parts.scheme, host, segs)
    if any(s.endswith(".git") for s in segs):
        cut = next(i for i, s in enumerate(segs) if s.endswith(".git"))
        repo = segs[cut].removesuffix(".git")
        owner = sanitize(segs[cut - 1]) if cut >= 1 else None
        url = parts._replace(path="/" + "/".join(segs[: cut + 1]), query="", fragment="").geturl()
        return RemoteSource("git", url, sanitize(repo), owner, subpath="/".join(segs[cut + 1 :]))
    url = parts._replace(fragment="").geturl()
    last = PurePosixPath(segs[-1]).stem if segs else host
    return RemoteSource("page", url, sanitize(last or host))


def _forge_source(scheme: str, host: str, segs: list[str]) -> RemoteSource:
    owner, repo = segs[0], segs[1].removesuffix(".git")
    rest = segs[2:]
    if rest[:1] == ["-"]:  # GitLab: /owner/repo/-/tree/<ref>/<path>
        rest = rest[1:]
    ref = None
    subpath = ""
    if len(rest) >= 2 and rest[0] in {"tree", "blob"}:
        ref, subpath = rest[1], "/".join(rest[2:])
    elif rest:
        raise InvalidArgument(
            f"Unsupported repository URL form: /{'/'.join(segs)}; use "
            "the repository URL or its /tree/<ref>/<path> page"
        )
    url = f"https://{host}/{owner}/{repo}.git"
    return RemoteSource("git", url, sanitize(repo), sanitize(owner), ref, subpath)


def check_subpath(subpath: str) -> str:
    """A repository subpath, normalised; InvalidArgument when it climbs out."""
    parts = [p for p in subpath.split("/") if p and p != "."]
    if any(p == ".." for p in parts):
        raise InvalidArgument(f"Invalid repository subpath '{subpath}'")
    return "/".join(parts)
