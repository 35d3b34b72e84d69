"""The console in a real browser: sign in, browse, read, search, a commit's memory diff,
memories with provenance, keys, uploads; each test asserts what the page shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from tests.browser.conftest import (
    ACCOUNT,
    ROOT_KEY,
    STORAGE_KEY,
    Page,
    Seeded,
)
from tests.support.remote_fixtures import serve_site


def nav_labels(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#nav a").all_inner_texts()]


def test_sign_in_with_a_key_keeps_it_in_the_tab_only(
    seeded: Seeded, console: Page, shot: Any
) -> None:
    page = console.page
    page.goto(seeded.url + "/")
    console.wait_ready()
    assert page.url.endswith("/console/#/signin")
    shot(page, "signin")
    page.get_by_label("API key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("alert").get_by_text("The key was not accepted").wait_for()

    # keyboard only: the key field has focus, Enter signs in
    page.get_by_label("API key").fill("")
    assert page.evaluate("document.activeElement.type") == "password"
    page.keyboard.type(seeded.admin_key)
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-ready=browse]")
    assert page.locator("#who-label").inner_text() == f"ada @ {ACCOUNT} (admin)"
    assert nav_labels(page) == [
        "Browse",
        "Search",
        "Sessions",
        "Memories",
        "Operations",
        "Admin",
        "Audit",
        "Usage",
    ]
    stored = page.evaluate(f"sessionStorage.getItem({STORAGE_KEY!r})")
    assert seeded.admin_key in stored
    assert page.evaluate(f"localStorage.getItem({STORAGE_KEY!r})") is None
    assert console.context.cookies() == []
    assert seeded.admin_key not in page.url

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_selector("body[data-ready=signin]")
    assert page.evaluate(f"sessionStorage.getItem({STORAGE_KEY!r})") is None
    assert not console.errors


def test_sections_follow_the_role(seeded: Seeded, console: Page) -> None:
    console.sign_in_storage(seeded.user_key)
    page = console.open(seeded.url, "admin")
    # a user key has no admin section: the route falls back to the data pages
    page.wait_for_selector("body[data-ready=browse]")
    assert nav_labels(page) == ["Browse", "Search", "Sessions", "Memories", "Operations", "Usage"]

    root = Page(console.context.browser.new_context())
    root.sign_in_storage(ROOT_KEY)
    rp = root.open(seeded.url, "browse")
    rp.wait_for_selector("body[data-ready=admin]")
    assert nav_labels(rp) == ["Operations", "Admin", "Audit", "Usage"]
    assert rp.locator("#who-label").inner_text() == "root key"
    root.context.close()


def test_dev_mode_signs_in_as_the_header_identity(seeded: Seeded, console: Page) -> None:
    page = console.open(seeded.dev_url, "signin")
    assert page.get_by_label("API key").count() == 0
    page.get_by_label("Account").fill("devco")
    page.get_by_label("User").fill("eve")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("body[data-ready=browse]")
    assert page.locator("#who-label").inner_text() == "eve @ devco (dev mode)"
    # the data comes from the account and user the headers name
    assert page.locator("a.node", has_text="viking://user/eve").count() == 1
    assert "Admin" in nav_labels(page)


def test_browse_lazy_tree_with_sidecars_beside_it(seeded: Seeded, console: Page, shot: Any) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "browse")
    tree = page.locator("ul.tree")
    # the selected directory (viking://resources by default) opens where it is chosen
    tree.get_by_role("button", name="Collapse viking://resources").wait_for()
    tree.get_by_role("button", name="Expand guide").click()
    tree.get_by_role("button", name="Expand api").click()
    assert tree.get_by_role("button", name="Collapse api").get_attribute("aria-expanded") == "true"
    tree.locator("a.node", has_text="client.py").wait_for()
    # not loaded before it was expanded
    assert tree.locator("a.node", has_text="note-000.md").count() == 0

    tree.locator("a.node", has_text="guide").click()
    page.wait_for_selector("#detail-title:text-is('guide')")
    console.wait_ready()
    l0 = page.get_by_role("region", name="L0 abstract")
    l1 = page.get_by_role("region", name="L1 overview")
    assert "handbook.md" in l1.inner_text() or "Guide" in l1.inner_text()
    assert l0.inner_text().strip() != "L0 abstract"
    assert page.locator(".facts dd", has_text="directory").count() == 1

    # keyboard: arrows move between entries, Right expands
    link = tree.locator("a.node", has_text="guide")
    link.focus()
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.textContent") == "README.md"
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.textContent") == "api"
    page.keyboard.press("ArrowLeft")  # collapses the expanded directory
    assert tree.get_by_role("button", name="Expand api").get_attribute("aria-expanded") == "false"
    shot(page, "browse")


def test_large_directory_loads_a_page_at_a_time(seeded: Seeded, console: Page) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "browse?uri=" + seeded.big_dir + "/note-005.md")
    tree = page.locator("ul.tree")
    group = tree.locator("a.node", has_text="many").locator("xpath=../..").locator("ul")
    page.wait_for_selector("a.node:text-is('note-199.md')")
    assert group.locator(":scope > li a.node").count() == 200
    group.get_by_role("button", name=re.compile(r"Show more \(200 shown\)")).click()
    page.wait_for_selector("a.node:text-is('note-229.md')")
    assert group.locator(":scope > li a.node").count() == 230
    assert page.locator("a.node.selected").inner_text() == "note-005.md"


def test_read_markdown_code_and_images(seeded: Seeded, console: Page, shot: Any) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "browse?uri=viking://resources/guide/README.md")
    body = page.locator(".file-body.markdown")
    body.locator("h1", has_text="Guide").wait_for()
    assert body.locator("strong", has_text="service").count() == 1
    assert body.locator("table td", has_text="1").count() == 1

    page.goto(seeded.url + "/console/#/browse?uri=viking://resources/guide/api/client.py")
    lines = page.locator(".code-view .line")
    page.wait_for_selector(".code-view .hljs-keyword")
    assert lines.count() == 11
    assert lines.nth(3).inner_text().endswith("class Client:")
    # the docstring spans lines: each line keeps its highlighting
    assert page.locator(".line[data-line='7'] .hljs-string").count() == 1
    shot(page, "read")

    page.goto(seeded.url + "/console/#/browse?uri=viking://resources/media/logo.png")
    img = page.locator("img.preview")
    img.wait_for()
    page.wait_for_function("document.querySelector('img.preview').naturalWidth > 0")
    assert img.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [40, 20]
    assert img.get_attribute("src").startswith("blob:")
    assert not console.errors


def test_search_side_by_side_with_matched_lines(seeded: Seeded, console: Page, shot: Any) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "search")
    page.get_by_label("Query").fill("signing key rotation schedule replicas")
    page.get_by_label("Context type").select_option("resource")
    page.get_by_role("button", name="Search").click()
    page.wait_for_selector("body[data-ready=search]")
    page.wait_for_function("location.hash.includes('q=signing')")
    console.wait_ready()
    titles = page.locator(".col h2").all_inner_texts()
    assert titles == ["Find (hybrid)", "Search · semantic", "Search · keywords", "Context mode"]
    find = page.locator("[data-mode=find]")
    hit = find.locator("li.hit", has_text="handbook.md").first
    reason = hit.locator(".reason").inner_text()
    span = re.search(r"lines (\d+)-(\d+)", reason)
    assert span, reason
    first, last = int(span.group(1)), int(span.group(2))
    assert float(hit.locator(".score").inner_text()) > 0
    # every hit of the resource filter is a resource
    assert set(
        find.locator(".badge", has_text=re.compile("^(resource|memory|skill)$")).all_inner_texts()
    ) == {"resource"}

    hit.locator("button.hit-uri").click()
    preview = page.get_by_role("region", name="Preview")
    preview.locator(".line.hit").first.wait_for()
    marked = preview.locator(".line.hit")
    assert marked.count() == last - first + 1
    assert "Key rotation" in " ".join(marked.all_inner_texts())

    ctx = page.locator("[data-mode=context]")
    assert ctx.locator("pre.rendered").count() == 1
    used = ctx.locator(".budget label").inner_text()
    m = re.match(r"(\d+) of 1600 tokens used", used)
    assert m and 0 < int(m.group(1)) <= 1600
    assert "<memory uri=" in ctx.locator("pre.rendered").inner_text()
    assert page.locator("[data-mode=keywords] li.hit").count() > 0
    shot(page, "search")

    # filters travel with every mode: level 2 only
    page.get_by_label("L2 file").check()
    page.get_by_role("button", name="Search").click()
    page.wait_for_function("location.hash.includes('levels=2')")
    console.wait_ready()
    levels = set(
        page.locator(
            "[data-mode=find] .hit-head .badge", has_text=re.compile(r"^L\d$")
        ).all_inner_texts()
    )
    assert levels == {"L2"}


def test_commit_memory_diff_reads_as_a_diff(seeded: Seeded, console: Page, shot: Any) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "sessions")
    page.get_by_role("link", name=seeded.session_id).click()
    page.get_by_role("link", name="archive_001").click()
    diff = page.locator(".memory-diff")
    diff.wait_for()
    console.wait_ready()
    added = diff.get_by_role("region", name="Added")
    assert added.locator(".badge.good", has_text="added").count() >= 1
    assert "concise answers" in added.inner_text()
    assert diff.locator(".diff-line.add").count() >= 1
    msgs = page.get_by_role("list", name="Messages of archive_001")
    assert msgs.locator("li.message").count() == 2
    assert "I prefer concise answers" in msgs.inner_text()

    live = page.get_by_role("list", name="Live messages")
    assert live.locator(".part.text", has_text="Here is what I used.").count() == 1
    context = live.locator(".part.context")
    assert context.get_by_role("link", name="viking://resources/guide").count() == 1
    tool = live.locator(".part.tool")
    assert "grep" in tool.inner_text() and "completed" in tool.inner_text()
    tool.get_by_text("Input").click()
    assert '"pattern": "rotation"' in tool.locator("pre").first.inner_text()
    # an image part shows its URL as text: the console loads nothing from other origins
    assert live.locator(".part.image").inner_text().endswith("https://example.com/diagram.png")
    assert live.locator(".part.image img").count() == 0

    page.get_by_role("link", name="archive_002").click()
    page.wait_for_selector("#archive-title:text-is('Archive archive_002')")
    skipped = page.locator(".memory-diff").get_by_role("region", name="Skipped")
    skipped.locator("td .badge", has_text="unchanged").first.wait_for()
    assert "concise-answers.md" in skipped.inner_text()  # memory files are named by slugs
    shot(page, "sessions")


def test_memories_link_back_to_their_messages(seeded: Seeded, console: Page, shot: Any) -> None:
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "memories?type=preferences")
    page.get_by_role("link", name=re.compile("concise-answers")).click()
    card = page.get_by_role("region", name="Provenance")
    card.wait_for()
    assert card.locator(".badge", has_text="preferences").count() == 1
    message = card.locator("a", has_text=re.compile("^msg_"))
    message_id = message.first.inner_text()
    shot(page, "memories")
    message.first.click()
    focus = page.locator(f"li.message.focus[data-id='{message_id}']")
    focus.wait_for(timeout=30_000)
    assert "I prefer concise answers" in focus.inner_text()


def test_create_an_account_and_rotate_a_key(seeded: Seeded, console: Page, shot: Any) -> None:
    console.sign_in_storage(ROOT_KEY)
    page = console.open(seeded.url, "admin")
    page.get_by_label("Account id").fill("newco")
    page.get_by_label("Admin user id").fill("zoe")
    page.get_by_role("button", name="Create account").click()
    first = page.get_by_label("New API key for zoe @ newco").input_value()
    assert re.fullmatch(r"[\w-]+\.[\w-]+\.[0-9a-f]{64}", first)
    health = httpx.get(seeded.url + "/health", headers={"X-API-Key": first}).json()
    assert (health["account_id"], health["user_id"], health["role"]) == ("newco", "zoe", "admin")
    page.get_by_role("button", name="Done").click()
    assert page.locator(".keybox").count() == 0
    # the key is shown once: nowhere on the page or in storage once dismissed
    assert first not in page.content()
    assert first not in page.evaluate(f"sessionStorage.getItem({STORAGE_KEY!r})")

    page.get_by_role("link", name="newco").click()
    page.wait_for_selector("h2:text-is('Account newco')")
    usage = page.get_by_role("region", name="Usage")
    usage.get_by_text("1 (1 admin, 0 user)").wait_for()
    row = page.locator("tr[data-user=zoe]")
    row.get_by_role("button", name="Rotate key").click()
    second = page.get_by_label("New API key for zoe @ newco").input_value()
    assert second != first
    shot(page, "admin")

    # a user added by the form gets a key once; the role select changes the role
    page.get_by_label("New user id").fill("yan")
    page.get_by_role("button", name="Add user").click()
    yan_key = page.get_by_label("New API key for yan @ newco").input_value()
    page.get_by_label("Role of yan").select_option("admin")
    page.locator("#status", has_text="yan is now admin").wait_for()
    who = httpx.get(seeded.url + "/health", headers={"X-API-Key": yan_key}).json()
    assert (who["user_id"], who["role"]) == ("yan", "admin")
    old = httpx.get(seeded.url + "/api/v1/system/status", headers={"X-API-Key": first})
    new = httpx.get(seeded.url + "/api/v1/system/status", headers={"X-API-Key": second})
    assert old.status_code == 401
    assert new.status_code == 200 and new.json()["result"]["user"] == "zoe"


def test_upload_a_folder_with_progress(
    seeded: Seeded, console: Page, shot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "manuals"
    (folder / "setup").mkdir(parents=True)
    (folder / "index.md").write_text("# Manuals\n\nStart here.\n")
    (folder / "setup" / "install.md").write_text("# Install\n\nRun the installer.\n")
    console.sign_in_storage(seeded.admin_key)
    page = console.open(seeded.url, "operations")
    page.get_by_label("Folder").set_input_files(str(folder))
    page.get_by_role("button", name="Upload").click()
    row = page.locator(".upload-row", has_text="manuals.zip")
    row.locator(".badge.good", has_text="added").wait_for(timeout=60_000)
    assert row.locator("progress").get_attribute("value") == "100"
    assert row.get_by_role("link", name="viking://resources/manuals").count() == 1
    page.get_by_role("button", name="Refresh").click()
    page.locator("table.tasks td", has_text="add_resource").first.wait_for()
    shot(page, "operations")
    # the tree kept its shape
    with httpx.Client(base_url=seeded.url, headers={"X-API-Key": seeded.admin_key}) as http:
        listed = http.get(
            "/api/v1/fs/tree", params={"uri": "viking://resources/manuals", "output": "original"}
        ).json()
    paths = {e["rel_path"] for e in listed["result"] if not e["isDir"]}
    assert paths == {"index.md", "setup/install.md"}


def test_add_a_web_page_from_a_url(seeded: Seeded, console: Page, tmp_path: Path) -> None:
    with serve_site(tmp_path / "git") as site:
        site.page(
            "/runbook.html",
            "<html><head><title>Runbook</title></head><body><main>"
            "<h1>Runbook</h1><p>Restart the pager relay with <code>relayctl bounce"
            "</code>.</p></main></body></html>",
        )
        console.sign_in_storage(seeded.admin_key)
        page = console.open(seeded.url, "operations")
        assert page.get_by_role("note").filter(has_text="does not fetch").count() == 0
        page.get_by_label("URL", exact=True).fill(site.url + "/runbook.html")
        page.get_by_role("button", name="Add", exact=True).click()
        link = page.locator("form a", has_text="viking://resources/runbook")
        link.wait_for(timeout=30_000)
        root = link.inner_text()
        with httpx.Client(
            base_url=seeded.url, headers={"X-API-Key": seeded.admin_key}, timeout=60
        ) as http:
            assert http.post("/api/v1/system/wait", json={"timeout": 60}).status_code == 200
            tree = http.get("/api/v1/fs/tree", params={"uri": root, "output": "original"})
            files = [e["uri"] for e in tree.json()["result"] if not e["isDir"]]
            assert len(files) == 1, files
            text = http.get("/api/v1/content/read", params={"uri": files[0]}).json()["result"]
    assert "relayctl bounce" in text and "<main>" not in text


def test_a_revoked_key_signs_out(seeded: Seeded, console: Page) -> None:
    with httpx.Client(base_url=seeded.url, headers={"X-API-Key": ROOT_KEY}) as http:
        base = f"/api/v1/admin/accounts/{ACCOUNT}/users"
        key = http.post(base, json={"user_id": "cy", "role": "user"}).json()["result"]["user_key"]
        console.sign_in_storage(key, seeded.url)
        page = console.open(seeded.url, "browse")
        assert page.locator("#who-label").inner_text() == f"cy @ {ACCOUNT} (user)"
        http.post(f"{base}/cy/key").raise_for_status()  # rotated elsewhere
    page.get_by_role("link", name="Sessions").click()
    page.wait_for_selector("body[data-ready=signin]")
    assert "no longer accepted" in page.locator("#status").inner_text()
    assert page.evaluate(f"sessionStorage.getItem({STORAGE_KEY!r})") is None
