"""What the console serves and how it renders what users control: a public static shell with
a strict Content-Security-Policy, and file names, contents and memories shown as text."""

from __future__ import annotations

from html.parser import HTMLParser

import httpx

from tests.browser.conftest import XSS_NAME, Page, Seeded

INJECTED = (
    "[onerror], [onload], [onclick], [onmouseover], script:not([src]), "
    "img[src='x'], svg, iframe, object, embed, a[href^='javascript:']"
)


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
        for name in ("src", "href"):
            if a.get(name) and not str(a[name]).startswith("#"):
                self.refs.append(str(a[name]))
        if any(k.startswith("on") for k in a) or "style" in a:
            raise AssertionError(f"inline handler or style on <{tag}>")


def test_shell_is_public_static_and_locked_down(seeded: Seeded) -> None:
    with httpx.Client(base_url=seeded.url) as http:
        root = http.get("/")
        # relative redirects keep a gateway's path prefix
        assert root.status_code == 307 and root.headers["location"] == "console/"
        assert http.get("/console").headers["location"] == "console/"
        assert http.get("/", follow_redirects=True).url.path == "/console/"
        # no key: the shell is public in api_key mode too
        page = http.get("/console/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "require-trusted-types-for 'script'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        refs = _Refs()
        refs.feed(page.text)
        assert refs.scripts and all(s.get("src") for s in refs.scripts)
        for ref in refs.refs:
            asset = http.get("/console/" + ref)
            assert asset.status_code == 200, ref
            assert "content-security-policy" in asset.headers
        js = http.get("/console/console.js")
        assert js.headers["content-type"].startswith("text/javascript")
        again = http.get("/console/console.js", headers={"If-None-Match": js.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        for bad in (
            "/console/nope.js",
            "/console/../pyproject.toml",
            "/console/%2e%2e/api/app.py",
            "/console/.hidden",
        ):
            r = http.get(bad)
            assert r.status_code == 404, bad
            assert r.json()["error"]["code"] == "NOT_FOUND"
        # data still needs the key
        assert http.get("/api/v1/fs/ls", params={"uri": "viking://resources"}).status_code == 401


def assert_nothing_injected(console: Page) -> None:
    page = console.page
    assert console.dialogs == []
    assert page.evaluate("window.__xss") is None
    found = page.evaluate(
        f"[...document.querySelectorAll({INJECTED!r})].map(e => e.outerHTML.slice(0, 120))"
    )
    assert found == []
    scripts = page.evaluate("[...document.scripts].map(s => s.getAttribute('src'))")
    assert scripts == ["console.js"]


def test_user_controlled_text_renders_as_text(seeded: Seeded, console: Page) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "browse?uri=" + seeded.xss_uri.replace("#", "%23"))
    # the name is a tree entry and a heading, as text
    page.locator("a.node", has_text=XSS_NAME).wait_for()
    assert page.locator("#detail-title").inner_text() == XSS_NAME
    body = page.locator(".file-body.markdown")
    body.locator("h1").wait_for()
    text = body.inner_text()
    assert "<script>window.__xss=2;alert(2)</script>" in body.locator("h1").inner_text()
    assert '<img src=x onerror="window.__xss=3;alert(3)">' in text
    assert "<script>window.__xss=7;alert(7)</script>" in text  # a fenced code block
    assert body.locator("a[href^='javascript']").count() == 0
    assert_nothing_injected(console)

    # the same file as a search hit and in the preview
    page.goto(
        seeded.url
        + "/console/#/search?q=Payloads%20stay%20text&scope="
        + "viking://resources/payloads"
    )
    console.wait_ready()
    hit = page.locator("[data-mode=find] button.hit-uri", has_text=XSS_NAME)
    hit.first.wait_for()
    hit.first.click()
    page.get_by_role("region", name="Preview").locator("h1").wait_for()
    assert_nothing_injected(console)

    # a memory whose text carries a payload, in the memory list, the memory and the diff
    page.goto(seeded.url + "/console/#/memories?type=preferences")
    console.wait_ready()
    # (its file name is a slug of the text; the entry shows name and abstract as text)
    entry = page.locator(".memory-list li", has_text="onerror").first
    entry.get_by_role("link").first.click()
    page.get_by_role("region", name="Memory").get_by_text(
        "onerror=window.__xss=8", exact=False
    ).first.wait_for()
    assert_nothing_injected(console)

    page.goto(seeded.url + f"/console/#/sessions?sid={seeded.session_id}&archive=archive_002")
    console.wait_ready()
    page.locator(".memory-diff").wait_for()
    assert (
        "<img src=x onerror=window.__xss=8;alert(8)>"
        in page.locator("ol.messages").first.inner_text()
    )
    assert "onerror=window.__xss=8" in page.locator(".memory-diff").inner_text()
    assert_nothing_injected(console)
    assert console.errors == []
