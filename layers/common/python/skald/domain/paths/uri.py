"""viking:// URIs: parse, validate, normalise, expand short forms, classify.

Canonical form inside the product: `viking://<scope>/<seg>/<seg>` with no trailing slash, no
`~`, no `session` alias and no path variables. Short forms exist only at the API edge and are
resolved by `parse_uri` with the caller's identity.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from skald.domain.errors import InvalidArgument, InvalidURI

SCHEME = "viking://"
PUBLIC_SCOPES = frozenset({"resources", "user", "agent", "system"})
INTERNAL_SCOPES = frozenset({"temp", "queue", "upload"})
LEGACY_SCOPES = frozenset({"session"})
ALL_SCOPES = tuple(sorted(PUBLIC_SCOPES | INTERNAL_SCOPES | LEGACY_SCOPES))
# Second segments of viking://user/... that used to be short forms of the caller's own space.
RESERVED_USER_SEGMENTS = frozenset(
    {"memories", "resources", "skills", "peers", "privacy", "sessions"}
)
MAX_URI_LENGTH = 4096
# Every URI must be storable on both blob stores, with the names derived from it. A local
# filesystem takes 255 bytes per path component (NAME_MAX) and S3 1024 bytes per key. The
# longest name derived from an entry's name is its hidden parsed-text sidecar
# `.<name>.parsed.json`, 13 bytes longer; a key is `<account>/<path>` with an account id of
# at most 255 bytes. So a segment takes at most 242 bytes and a path (`scope/a/b`) 755.
NAME_MAX_BYTES = 255
KEY_MAX_BYTES = 1024
DERIVED_NAME_EXTRA_BYTES = len(".") + len(".parsed.json")
MAX_SEGMENT_BYTES = NAME_MAX_BYTES - DERIVED_NAME_EXTRA_BYTES
MAX_PATH_BYTES = KEY_MAX_BYTES - 255 - len("/") - DERIVED_NAME_EXTRA_BYTES
# Segments below the scheme, scope included: deep enough for any real tree, and a bound on the
# work one request can ask for (every ancestor directory is created, summarised and indexed).
MAX_DEPTH = 64

_IDENTIFIER = re.compile(r"^[a-zA-Z0-9_.@-]+$")
_ENCODED_SEPARATOR = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)
_VARIABLE = re.compile(r"\{([^{}/]*)\}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Characters a new name may not hold: bidirectional controls and other invisible format
# characters (Unicode Cf), C1 controls and line/paragraph separators. Unseen, they make a
# listing lie: U+202E shows "gpj.exe" as "exe.jpg", a zero-width space makes two names look
# alike. The joiners stay: some scripts and emoji sequences are written with them.
_DECEPTIVE_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})
_ALLOWED_FORMAT = frozenset({"\u200c", "\u200d"})  # zero-width non-joiner, joiner


def deceptive_char(name: str) -> str | None:
    """The first character of `name` that could disguise it in a listing, if any."""
    for c in name:
        if unicodedata.category(c) in _DECEPTIVE_CATEGORIES and c not in _ALLOWED_FORMAT:
            return c
    return None


def validate_identifier(value: str, kind: str = "identifier", *, account: bool = False) -> str:
    """Account, user, peer and group ids: `^[a-zA-Z0-9_.@-]+$`, not `.`/`..`, one `@` at most,
    255 chars at most; account ids may not start with `_` (reserved for the system)."""
    if not value or len(value) > 255:
        raise InvalidArgument(f"Invalid {kind} '{value}': must be 1 to 255 characters")
    if not _IDENTIFIER.match(value):
        raise InvalidArgument(f"Invalid {kind} '{value}': only letters, digits and _ . @ -")
    if value in {".", ".."}:
        raise InvalidArgument(f"Invalid {kind} '{value}'")
    if value.count("@") > 1:
        raise InvalidArgument(f"Invalid {kind} '{value}': at most one '@'")
    if account and value.startswith("_"):
        raise InvalidArgument(f"Invalid {kind} '{value}': may not start with '_'")
    return value


def is_identifier(value: str) -> bool:
    try:
        validate_identifier(value)
    except InvalidArgument:
        return False
    return True


@dataclass(frozen=True, order=True)
class VikingURI:
    """A canonical URI. `scope` is None only for the root `viking://`."""

    scope: str | None
    parts: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.scope is None:
            return SCHEME
        return SCHEME + "/".join((self.scope, *self.parts))

    @property
    def uri(self) -> str:
        return str(self)

    @property
    def is_root(self) -> bool:
        return self.scope is None

    @property
    def name(self) -> str:
        if self.parts:
            return self.parts[-1]
        return self.scope or ""

    @property
    def segments(self) -> tuple[str, ...]:
        """Every segment after the scheme, scope included."""
        return () if self.scope is None else (self.scope, *self.parts)

    @property
    def parent(self) -> VikingURI | None:
        if self.scope is None:
            return None
        if not self.parts:
            return ROOT
        return VikingURI(self.scope, self.parts[:-1])

    def child(self, *names: str) -> VikingURI:
        segs = [*self.segments]
        for name in names:
            segs.extend(s for s in name.split("/") if s)
        for seg in segs[1:] if segs else []:
            _check_segment(str(self), seg)
        if not segs:
            return ROOT
        return VikingURI(segs[0], tuple(segs[1:]))

    def is_within(self, other: VikingURI) -> bool:
        """True when self equals `other` or lies below it."""
        mine, theirs = self.segments, other.segments
        return mine[: len(theirs)] == theirs

    def ancestors(self) -> list[str]:
        """Every directory URI above this one, from `viking://<scope>` down to the parent."""
        segs = self.segments
        return [SCHEME + "/".join(segs[:i]) for i in range(1, len(segs))]

    def relative_to(self, other: VikingURI) -> str:
        if not self.is_within(other):
            raise ValueError(f"{self} is not within {other}")
        return "/".join(self.segments[len(other.segments) :])

    def blob_key(self, account: str) -> str:
        """Storage key of this URI inside `account`'s partition."""
        if self.scope is None:
            return f"{account}/"
        return f"{account}/" + "/".join(self.segments)


ROOT = VikingURI(None)


def from_canonical(uri: str) -> VikingURI:
    """Parses a URI the product produced itself (no short forms, no variables)."""
    if not uri.startswith(SCHEME):
        raise InvalidURI(uri, "URI must start with 'viking://'")
    segs = [s for s in uri[len(SCHEME) :].split("/") if s]
    for seg in segs:
        _check_segment(uri, seg)
    if not segs:
        return ROOT
    return VikingURI(segs[0], tuple(segs[1:]))


def dot_key_below(prefix: str, key: str) -> bool:
    """Whether a segment of `key` after the last "/" of `prefix` starts with "." (a sidecar or
    hidden entry below that prefix). `key` starts with `prefix`."""
    rel = key[prefix.rfind("/") + 1 :]
    return rel.startswith(".") or "/." in rel


def from_blob_key(key: str) -> tuple[str, VikingURI]:
    """Inverse of VikingURI.blob_key: (account, uri)."""
    account, _, rest = key.partition("/")
    segs = [s for s in rest.split("/") if s]
    if not segs:
        return account, ROOT
    return account, VikingURI(segs[0], tuple(segs[1:]))


def render_variables(raw: str, today: date) -> str:
    """Substitutes `{calendar:*}` path variables; any other `{...}` is an error."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        kind, _, arg = name.partition(":")
        if kind != "calendar" or arg not in _CALENDAR:
            raise InvalidURI(raw, f"unknown path variable '{{{name}}}'")
        return _CALENDAR[arg](today)

    return _VARIABLE.sub(sub, raw)


def _quarter(d: date) -> str:
    return f"Q{(d.month - 1) // 3 + 1}"


def _week(d: date) -> str:
    return f"W{d.isocalendar().week:02d}"


_CALENDAR: dict[str, Callable[[date], str]] = {
    "today": lambda d: d.strftime("%Y/%m/%d"),
    "yesterday": lambda d: (d - timedelta(days=1)).strftime("%Y/%m/%d"),
    "tomorrow": lambda d: (d + timedelta(days=1)).strftime("%Y/%m/%d"),
    "year": lambda d: d.strftime("%Y"),
    "month": lambda d: d.strftime("%m"),
    "day": lambda d: d.strftime("%d"),
    "ym": lambda d: d.strftime("%Y/%m"),
    "quarter": _quarter,
    "yq": lambda d: f"{d.year}/{_quarter(d)}",
    "week": _week,
    "yw": lambda d: f"{d.isocalendar().year}/{_week(d)}",
}


def _check_path(raw: str, segs: list[str]) -> None:
    if len(segs) > MAX_DEPTH:
        raise InvalidURI(_short(raw), f"deeper than {MAX_DEPTH} segments")
    if sum(len(seg.encode("utf-8")) for seg in segs) + len(segs) - 1 > MAX_PATH_BYTES:
        raise InvalidURI(_short(raw), f"the path is longer than {MAX_PATH_BYTES} bytes")


def check_storable(uri: VikingURI) -> VikingURI:
    """Refuses a URI that a blob store could not hold with its derived names, or with a name
    that could disguise itself in a listing (`deceptive_char`): a new entry, checked before
    anything is written. Existing entries are read and listed whatever their names, so data
    stored under older rules stays reachable."""
    segs = list(uri.segments)
    raw = str(uri)
    for seg in segs:
        if len(seg.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise InvalidURI(_short(raw), f"a name is longer than {MAX_SEGMENT_BYTES} bytes")
        bad = deceptive_char(seg)
        if bad is not None:
            raise InvalidURI(
                _short(raw),
                f"a name holds U+{ord(bad):04X} "
                f"({unicodedata.name(bad, 'unnamed')}), an invisible or "
                "reordering character that would disguise it in a listing",
            )
    _check_path(raw, segs)
    return uri


_ENCODED_SEPARATOR_PERCENT = re.compile(r"%(?=2e|2f|5c|00)", re.IGNORECASE)
_NOT_IN_NAMES = str.maketrans({"/": "_", "\\": "_", "{": "(", "}": ")"})


def addressable_name(name: str) -> str:
    """A name from outside (an uploaded file, an archive member) made into a segment that
    `parse_uri` reads back as itself, so the entry it names can be read, listed and removed:
    separators, control and other deceptive characters (`deceptive_char`) become `_`, braces
    (path variables) become parentheses, the `%` of an encoded dot, separator or NUL becomes
    `_`, a lone surrogate becomes U+FFFD. A name that stays empty, `.` or `..` is refused; its
    length is checked with the entry (`check_storable`)."""
    cleaned = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in name)
    cleaned = _CONTROL.sub("_", cleaned.translate(_NOT_IN_NAMES))
    cleaned = "".join("_" if deceptive_char(c) else c for c in cleaned)
    cleaned = _ENCODED_SEPARATOR_PERCENT.sub("_", cleaned).strip()
    if cleaned in {"", ".", ".."}:
        raise InvalidArgument(f"Invalid name {name!r}", {"name": name})
    return cleaned


def _short(raw: str) -> str:
    return raw if len(raw) <= 256 else raw[:256] + "..."


def _check_segment(raw: str, seg: str) -> None:
    if seg in {".", ".."}:
        raise InvalidURI(raw, "'.' and '..' segments are not allowed")
    if "\\" in seg:
        raise InvalidURI(raw, "backslashes are not allowed")
    if _CONTROL.search(seg):
        raise InvalidURI(raw, "control characters are not allowed")
    try:
        size = len(seg.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidURI(_short(raw), "not valid Unicode text (a lone surrogate)") from None
    if size > NAME_MAX_BYTES:
        raise InvalidURI(_short(raw), f"a segment is longer than {NAME_MAX_BYTES} bytes")


def _check_raw(raw: str) -> None:
    """The checks on the whole string, before it is split."""
    if not isinstance(raw, str) or not raw:
        raise InvalidURI(str(raw), "URI is empty")
    if len(raw) > MAX_URI_LENGTH:
        raise InvalidURI(raw[:64] + "...", f"URI is longer than {MAX_URI_LENGTH} characters")
    if not raw.startswith(SCHEME):
        raise InvalidURI(raw, "URI must start with 'viking://'")
    if _ENCODED_SEPARATOR.search(raw):
        raise InvalidURI(raw, "percent-encoded dots, slashes and backslashes are not allowed")
    if "\\" in raw:
        raise InvalidURI(raw, "backslashes are not allowed")


def _segments(raw: str, body: str) -> list[str]:
    segs = body.split("/")
    if len(segs) > MAX_DEPTH:  # before any per-segment work
        raise InvalidURI(_short(raw), f"deeper than {MAX_DEPTH} segments")
    if any(s == "" for s in segs):
        raise InvalidURI(raw, "empty path segments are not allowed")
    for seg in segs:
        _check_segment(raw, seg)
    return segs


def _expand_short_forms(segs: list[str], user_id: str) -> tuple[str, list[str]]:
    """`~/...` and `session/...` name places in the caller's own user space."""
    scope, rest = segs[0], segs[1:]
    if scope == "~":
        return "user", [user_id, *rest]
    if scope == "session":
        return "user", [user_id, "sessions", *rest]
    return scope, rest


def _check_scope(
    raw: str, scope: str, rest: list[str], *, privileged: bool, allow_internal: bool
) -> None:
    if scope not in PUBLIC_SCOPES and scope not in INTERNAL_SCOPES:
        raise InvalidURI(raw, f"Invalid scope '{scope}'. Must be one of: {', '.join(ALL_SCOPES)}")
    if scope in INTERNAL_SCOPES and not allow_internal:
        raise InvalidURI(raw, f"scope '{scope}' is internal and not accessible")
    if scope == "user" and rest:
        owner = rest[0]
        if owner in RESERVED_USER_SEGMENTS and not privileged:
            raise InvalidURI(
                raw,
                f"'viking://user/{owner}' is not a user space; use 'viking://~/{owner}' "
                "for your own",
            )
        if not is_identifier(owner):
            raise InvalidURI(raw, f"invalid user id '{owner}'")


def parse_uri(
    raw: str,
    *,
    user_id: str,
    privileged: bool = False,
    allow_internal: bool = False,
    now: datetime | None = None,
) -> VikingURI:
    """Validates a client-supplied URI and resolves its short forms for the caller.

    `privileged` callers (root, dev mode) may name `viking://user/<reserved word>` literally;
    others get a 400 pointing them at `viking://~/`.
    """
    _check_raw(raw)
    body = raw[len(SCHEME) :]
    if "{" in body or "}" in body:
        body = render_variables(body, (now or datetime.now(UTC)).date())
    if body.endswith("/"):
        body = body[:-1]
    if not body:
        return ROOT
    scope, rest = _expand_short_forms(_segments(raw, body), user_id)
    _check_scope(raw, scope, rest, privileged=privileged, allow_internal=allow_internal)
    return VikingURI(scope, tuple(rest))


# --------------------------------------------------------------------------------------------
# Classification


MEMORY_TYPES_BY_DIR = {
    "preferences": "preferences",
    "entities": "entities",
    "events": "events",
    "cases": "cases",
    "experiences": "experiences",
    "trajectories": "trajectories",
    "skills": "skills",
    "tools": "tools",
    "patterns": "patterns",
}
MEMORY_TYPES_BY_FILE = {"profile.md": "profile", "identity.md": "identity", "soul.md": "soul"}


@dataclass(frozen=True)
class UriClass:
    scope: str | None
    context_type: str  # memory | resource | skill
    owner: str | None = None  # user id of a user-space URI
    peer: str | None = None
    memory_root: VikingURI | None = None
    memory_type: str | None = None
    skill_namespace: VikingURI | None = None
    skill_root: VikingURI | None = None  # the package directory of a skill
    session_id: str | None = None


def classify_uri(uri: VikingURI) -> UriClass:
    """Scope, context type (by the first content segment), owner, peer, memory and skill roots."""
    scope, p = uri.scope, uri.parts
    if scope == "user" and p:
        owner = p[0]
        rest = p[1:]
        base = VikingURI("user", (owner,))
        peer = None
        if len(rest) >= 2 and rest[0] == "peers":
            peer = rest[1]
            base = base.child("peers", peer)
            rest = rest[2:]
        head = rest[0] if rest else None
        if head == "memories":
            mroot = base.child("memories")
            return UriClass(
                scope, "memory", owner, peer, memory_root=mroot, memory_type=_memory_type(rest[1:])
            )
        if head == "sessions":
            sid = rest[1] if len(rest) > 1 else None
            return UriClass(scope, "memory", owner, peer, session_id=sid)
        if head == "skills":
            ns = base.child("skills")
            root = ns.child(rest[1]) if len(rest) > 1 and not rest[1].startswith(".") else None
            return UriClass(scope, "skill", owner, peer, skill_namespace=ns, skill_root=root)
        return UriClass(scope, "resource", owner, peer)
    if scope == "agent" and p and p[0] == "skills":
        ns = VikingURI("agent", ("skills",))
        # dot names at the namespace level are its own sidecars, not packages
        root = ns.child(p[1]) if len(p) > 1 and not p[1].startswith(".") else None
        return UriClass(scope, "skill", skill_namespace=ns, skill_root=root)
    if scope == "agent" and p and p[0] == "memories":
        mroot = VikingURI("agent", ("memories",))
        return UriClass(scope, "memory", memory_root=mroot, memory_type=_memory_type(p[1:]))
    if scope == "system" and len(p) >= 2 and p[0] == "compile" and p[1] == "example-skills":
        ns = VikingURI("system", ("compile", "example-skills"))
        root = ns.child(p[2]) if len(p) > 2 and not p[2].startswith(".") else None
        return UriClass(scope, "skill", skill_namespace=ns, skill_root=root)
    return UriClass(scope, "resource")


def _memory_type(rest: tuple[str, ...]) -> str | None:
    if not rest:
        return None
    if len(rest) == 1 and rest[0] in MEMORY_TYPES_BY_FILE:
        return MEMORY_TYPES_BY_FILE[rest[0]]
    return MEMORY_TYPES_BY_DIR.get(rest[0])
