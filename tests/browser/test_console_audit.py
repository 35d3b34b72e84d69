"""The console's Audit page in a real browser: an account admin sees their account's records
(time, principal, source IP, request id, action, target, outcome), filters them by action,
status, user and request id, and pages through them; root sees every account and filters by
one; a plain user has no Audit page."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.browser.conftest import ROOT_KEY, Page, Seeded


def _nav(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#nav a").all_inner_texts()]


def _account(url: str) -> tuple[str, str, str]:
    """A fresh account with audited actions: root creates it (ava, its admin) and registers
    uma; ava removes 27 files that are not there and one that is, uma one of her own."""
    name = "audit-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=url, headers={"X-API-Key": ROOT_KEY}, timeout=60) as root:
        ava = root.post("/api/v1/admin/accounts", json={"account_id": name, "admin_user_id": "ava"})
        uma = root.post(
            f"/api/v1/admin/accounts/{name}/users", json={"user_id": "uma", "role": "user"}
        )
    ava_key, uma_key = ava.json()["result"]["user_key"], uma.json()["result"]["user_key"]
    with httpx.Client(base_url=url, headers={"X-API-Key": ava_key}, timeout=60) as http:
        for i in range(27):
            assert (
                http.delete(
                    "/api/v1/fs", params={"uri": f"viking://resources/missing-{i:02d}.md"}
                ).status_code
                == 404
            )
        http.post(
            "/api/v1/content/write",
            json={"uri": "viking://resources/real.md", "content": "real", "mode": "create"},
        )
        http.delete("/api/v1/fs", params={"uri": "viking://resources/real.md"})
    with httpx.Client(base_url=url, headers={"X-API-Key": uma_key}, timeout=60) as http:
        http.post(
            "/api/v1/content/write",
            json={"uri": "viking://resources/uma.md", "content": "mine", "mode": "create"},
        )
        gone = http.delete("/api/v1/fs", params={"uri": "viking://resources/uma.md"})
    return name, ava_key, gone.headers["x-request-id"]


def _rows(page: Any) -> Any:
    return page.locator("table.audit tbody tr")


def test_an_admin_reads_filters_and_pages_the_audit_trail(
    seeded: Seeded, console: Page, shot: Any
) -> None:
    name, ava_key, uma_request = _account(seeded.url)
    console.sign_in_storage(ava_key, seeded.url)
    page = console.open(seeded.url, "audit")
    assert "Audit" in _nav(page)
    assert page.locator("#audit-total").inner_text() == "31 records (13% succeeded)"
    assert _rows(page).count() == 25
    newest = _rows(page).first
    cells = newest.locator("td").all_inner_texts()
    assert cells[1].startswith(f"uma @ {name} (user)")
    assert cells[2] == "127.0.0.1"
    assert cells[3] == uma_request
    assert cells[4] == "fs.rm"
    assert cells[5].startswith("viking://resources/uma.md")
    assert cells[6].startswith("ok 200")
    assert cells[0].endswith("Z")
    shot(page, "audit")

    # the next page holds the oldest records
    page.get_by_role("button", name="Older").click()
    page.wait_for_selector("body[data-ready=audit]")
    assert page.locator("#audit-page").inner_text() == "Page 2 of 2"
    assert _rows(page).count() == 6  # the oldest: root's account.create and user.register
    assert page.get_by_role("button", name="Older").is_disabled()

    # status, then user, then request id
    page.get_by_label("Status").select_option("error")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_selector("body[data-ready=audit]")
    assert page.locator("#audit-total").inner_text() == "27 records (0% succeeded)"
    assert "NOT_FOUND" in _rows(page).first.inner_text()
    assert _rows(page).first.get_attribute("data-outcome") == "error"

    page.get_by_label("Status").select_option("")
    page.get_by_label("User").fill("uma")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_selector("body[data-ready=audit]")
    assert _rows(page).count() == 1

    page.get_by_label("User").fill("")
    page.get_by_label("Request id").fill(uma_request)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_selector("body[data-ready=audit]")
    assert _rows(page).count() == 1 and uma_request in _rows(page).first.inner_text()

    page.get_by_label("Request id").fill("")
    page.get_by_label("Action").select_option("session.delete")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_selector("body[data-ready=audit]")
    assert page.get_by_text("No records.").is_visible()
    # an admin has no account filter: their own account is all they see
    assert page.get_by_label("Account").count() == 0
    assert not console.errors


def test_root_sees_every_account_and_a_user_no_audit(seeded: Seeded, console: Page) -> None:
    name, _, _ = _account(seeded.url)
    console.sign_in_storage(ROOT_KEY, seeded.url)
    page = console.open(seeded.url, "audit")
    page.get_by_label("Account").fill(name)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_selector("body[data-ready=audit]")
    assert page.locator("#audit-total").inner_text().startswith("31 records")
    assert {r.get_attribute("data-action") for r in _rows(page).all()} == {"fs.rm"}  # newest
    assert f"account_id={name}" in page.url

    user = Page(console.context.browser.new_context())
    user.sign_in_storage(seeded.user_key, seeded.url)
    up = user.open(seeded.url, "audit")
    up.wait_for_selector("body[data-ready=browse]")  # no Audit page: back to the data
    assert "Audit" not in _nav(up)
    user.context.close()
