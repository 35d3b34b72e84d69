"""HTML and EPUB to Markdown with Beautiful Soup (MIT, lxml as its parser) and markdownify
(MIT). The main content is what a page's `<main>` / `<article>` holds (else its body), without
navigation, headers, footers, scripts and forms; headings, links, lists and tables are kept.
Images become their alt text: no data URI ever reaches the text."""

from __future__ import annotations

import posixpath
import re
import warnings
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import unquote

from skald.adapters.parsers.common import Truncated, Unparseable, Writer, open_zip

_DROP = [
    "script",
    "style",
    "noscript",
    "template",
    "iframe",
    "object",
    "embed",
    "svg",
    "canvas",
    "form",
    "button",
    "input",
    "select",
    "textarea",
    "nav",
    "aside",
    "dialog",
]
_CHROME_ROLES = ("navigation", "banner", "contentinfo", "complementary", "search")


def html_to_markdown(html: bytes | str) -> tuple[str, str]:
    """(title, Markdown of the main content)."""
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    with warnings.catch_warnings():  # bs4 warns about inputs that look like file names/URLs
        warnings.simplefilter("ignore")
        soup = BeautifulSoup(html, "lxml")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(_DROP):
        tag.decompose()
    for tag in soup.find_all(True, role=list(_CHROME_ROLES)):
        tag.decompose()
    for tag in soup.find_all(["header", "footer"]):
        if tag.find_parent(["article", "main"]) is None:
            tag.decompose()  # page chrome; an article's own header stays
    for img in soup.find_all("img"):
        alt = str(img.get("alt") or "").strip()
        img.replace_with(alt)
    for link in soup.find_all("a"):
        href = str(link.get("href") or "")
        if not href.startswith(("http://", "https://", "/", "#", "mailto:")) and not re.match(
            r"^[\w./-]+$", href
        ):
            del link["href"]  # javascript:, data: and other non-navigable targets
    main = soup.find("main") or soup.find(True, role="main")
    if main is None:
        articles = soup.find_all("article")
        main = max(articles, key=lambda a: len(a.get_text())) if articles else None
    root = main or soup.body or soup
    text = markdownify(str(root), heading_style="ATX", bullets="-", strip=["img"])
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    if title and not re.search(r"^# ", text, re.MULTILINE):
        text = f"# {title}\n\n{text}"
    return title, text


def parse_html(data: bytes, out: Writer) -> None:
    title, text = html_to_markdown(data)  # bytes: Beautiful Soup honours the declared charset
    if title:
        out.meta["title"] = title
    out.add(text + "\n")


_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}


def parse_epub(data: bytes, out: Writer) -> None:
    """EPUB 2/3: the OPF package names the reading order (its spine); each chapter is XHTML.
    Read with the standard library rather than EbookLib, which is AGPL."""
    zf = open_zip(data, out.limits, "EPUB book")
    with zf:
        try:
            container = ET.fromstring(zf.read("META-INF/container.xml"))
        except (KeyError, ET.ParseError):
            raise Unparseable("corrupt EPUB: no readable META-INF/container.xml") from None
        rootfile = container.find(".//c:rootfile", _NS)
        opf_path = rootfile.get("full-path", "") if rootfile is not None else ""
        try:
            package = ET.fromstring(zf.read(opf_path))
        except (KeyError, ET.ParseError):
            raise Unparseable(f"corrupt EPUB: package document '{opf_path}' missing") from None
        title_el = package.find(".//dc:title", _NS)
        title = (title_el.text or "").strip() if title_el is not None else ""
        creator = package.find(".//dc:creator", _NS)
        meta: dict[str, Any] = out.meta
        if title:
            meta["title"] = title
            out.add(f"# {title}\n\n")
        if creator is not None and (creator.text or "").strip():
            meta["author"] = (creator.text or "").strip()
        base = posixpath.dirname(opf_path)
        items = {i.get("id"): i.get("href", "") for i in package.findall(".//opf:item", _NS)}
        spine = [items.get(ref.get("idref")) for ref in package.findall(".//opf:itemref", _NS)]
        chapters = [posixpath.normpath(posixpath.join(base, unquote(h))) for h in spine if h]
        meta["chapters"] = len(chapters)
        names = set(zf.namelist())
        for number, path in enumerate(chapters, 1):
            if number > out.limits.max_pages:
                raise Truncated(f"stopped after {out.limits.max_pages} chapters")
            out.tick()
            if path not in names:
                continue
            _, text = html_to_markdown(zf.read(path))
            # Chapter headings move one level down under the book's title.
            text = re.sub(r"^(#{1,5}) ", r"#\1 ", text, flags=re.MULTILINE) if title else text
            if text:
                out.add(text + "\n\n")
