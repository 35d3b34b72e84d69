"""Repositories on GitHub and GitLab fetched as the forge's zip archive of one ref, over the
guarded http client: no git client needed (the Lambda runtime has none), one request plus
the redirects the forge answers, each checked."""

from __future__ import annotations

import io
import stat
import zipfile
from urllib.parse import quote, urlsplit

from skald.adapters.fetch.guarded_http import GuardedHttp
from skald.domain.sources.netguard import FetchFailed, FetchLimits
from skald.domain.sources.remote import GITHUB_HOSTS, GITLAB_HOSTS


def archive_url(url: str, ref: str | None) -> str | None:
    """The zip archive of `ref` (the default branch: HEAD) of a forge repository URL, or None
    when `url` is not on a known forge."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    segs = [s for s in parts.path.split("/") if s]
    if len(segs) != 2:
        return None
    owner, repo = segs[0], segs[1].removesuffix(".git")
    name = quote(ref or "HEAD", safe="")
    if host in GITHUB_HOSTS:
        return f"https://codeload.github.com/{owner}/{repo}/zip/{name}"
    if host in GITLAB_HOSTS:
        return f"https://gitlab.com/{owner}/{repo}/-/archive/{name}/{repo}-{name}.zip"
    return None


def fetch_archive(http: GuardedHttp, url: str, limits: FetchLimits) -> list[tuple[str, bytes]]:
    page = http.get(url, limits)
    try:
        with zipfile.ZipFile(io.BytesIO(page.data)) as zf:
            return _members(zf, limits)
    except zipfile.BadZipFile:
        raise FetchFailed("invalid", f"{url} did not answer a zip archive") from None


def _members(zf: zipfile.ZipFile, limits: FetchLimits) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    total = 0
    for info in zf.infolist():
        if info.is_dir() or stat.S_ISLNK(info.external_attr >> 16):
            continue
        parts = [p for p in info.filename.split("/") if p]
        # every forge archive wraps the tree in one `<repo>-<ref>/` folder
        rel = parts[1:]
        if (
            not rel
            or any(p in {".", ".."} for p in rel)
            or info.filename.startswith("/")
            or "\\" in info.filename
        ):
            continue
        if len(out) >= limits.max_files:
            raise FetchFailed(
                "too_large",
                f"The repository has more than {limits.max_files} files",
                {"limit": limits.max_files},
            )
        with zf.open(info) as member:
            data = member.read(limits.max_bytes - total + 1)
        total += len(data)
        if total > limits.max_bytes:
            raise FetchFailed(
                "too_large",
                f"The repository's files are above the limit of {limits.max_bytes} bytes",
                {"limit": limits.max_bytes},
            )
        out.append(("/".join(rel), data))
    return out
