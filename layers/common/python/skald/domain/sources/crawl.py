"""Which pages of a site a web source covers: the start page and the pages it links to, on
the same origin and below the start page's folder, breadth first, a few links deep.

`https://docs.example.com/guide/intro.html` covers `/guide/setup.html` and
`/guide/api/keys.html`, never `/blog/` or another host. Each page is stored at its path
relative to that folder, so the site keeps its shape below the resource's root."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import PurePosixPath
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

# Links followed from the start page (1: the pages it links to, 2: theirs too).
MAX_DEPTH = 2
# Pages of one site, the start page included (the fetch's file cap applies too).
MAX_PAGES = 100
# Media types whose links are followed.
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href.strip())


def page_links(html: str, page_url: str) -> list[str]:
    """The absolute http(s) URLs `html` links to, without fragments, in document order,
    each once."""
    parser = _Anchors()
    try:
        parser.feed(html)
        parser.close()
    except (ValueError, AssertionError):  # malformed markup: the links read so far
        pass
    seen: dict[str, None] = {}
    for href in parser.hrefs:
        url = urldefrag(urljoin(page_url, href))[0]
        if urlsplit(url).scheme.lower() in {"http", "https"}:
            seen.setdefault(url, None)
    return list(seen)


def site_folder(start_url: str) -> str:
    """The folder the start page sits in: the scope of the crawl (`/guide/` for
    `/guide/intro.html` and for `/guide/`)."""
    path = urlsplit(start_url).path or "/"
    return path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"


def in_scope(url: str, start_url: str) -> bool:
    """Same scheme, host and port as the start page, at or below its folder, no query."""
    a, b = urlsplit(url), urlsplit(start_url)
    return (
        (a.scheme.lower(), a.netloc.lower()) == (b.scheme.lower(), b.netloc.lower())
        and (a.path or "/").startswith(site_folder(start_url))
        and not a.query
    )


def relative_path(url: str, start_url: str) -> str:
    """Where a linked page lands below the root: its path below the start page's folder
    (`index` for a folder's own page); an empty or unsafe path gives ''."""
    rel = unquote((urlsplit(url).path or "/")[len(site_folder(start_url)) :])
    if rel == "" or rel.endswith("/"):
        rel += "index"
    parts = PurePosixPath(rel).parts
    if any(p in {"..", "."} for p in parts):
        return ""
    return "/".join(parts)
