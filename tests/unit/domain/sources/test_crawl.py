"""Which pages a web source covers, and where each lands below the root."""

from __future__ import annotations

from skald.domain.sources.crawl import in_scope, page_links, relative_path, site_folder
from skald.services.ingest.fetch import linked_file_name

START = "https://docs.example.com/guide/intro.html"


def test_links_are_absolute_without_fragments_each_once() -> None:
    html = (
        '<a href="setup.html#a">x</a><a href="setup.html">y</a><a href="/blog/">z</a>'
        '<a href="mailto:a@b.c">m</a><a href="javascript:alert(1)">j</a>'
        '<a href="https://other.example/">o</a><a>no href</a><p href="x.html">p</p>'
    )
    assert page_links(html, START) == [
        "https://docs.example.com/guide/setup.html",
        "https://docs.example.com/blog/",
        "https://other.example/",
    ]
    assert page_links("<a href='a.html'", START) == []  # unfinished markup: nothing breaks


def test_scope_is_the_start_pages_folder_on_its_origin() -> None:
    assert site_folder(START) == "/guide/"
    assert site_folder("https://docs.example.com/guide/") == "/guide/"
    assert site_folder("https://docs.example.com") == "/"
    assert in_scope("https://docs.example.com/guide/api/keys.html", START)
    assert not in_scope("https://docs.example.com/blog/post.html", START)
    assert not in_scope("http://docs.example.com/guide/a.html", START)  # another scheme
    assert not in_scope("https://docs.example.com:8443/guide/a.html", START)
    assert not in_scope("https://docs.example.com/guide/a.html?page=2", START)


def test_where_a_linked_page_lands() -> None:
    assert relative_path("https://docs.example.com/guide/api/keys.html", START) == "api/keys.html"
    assert relative_path("https://docs.example.com/guide/api/", START) == "api/index"
    assert relative_path("https://docs.example.com/guide/a%20b.html", START) == "a b.html"
    assert relative_path("https://docs.example.com/guide/x/../../etc", START) == ""
    assert linked_file_name("api/index", "text/html") == "api/index.html"
    assert linked_file_name("notes.md", "text/markdown") == "notes.md"
    assert linked_file_name("page.php", "text/html") == "page.php.html"
    assert linked_file_name("old.htm", "text/html") == "old.htm"
    assert linked_file_name("data", "application/octet-stream") == ""
    assert linked_file_name(".abstract.md", "text/markdown") == ""  # Skald's own names
    assert linked_file_name("", "text/html") == ""
