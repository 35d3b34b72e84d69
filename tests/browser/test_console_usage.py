"""The console's Usage page in a real browser: an account admin sees today's cards and bar
charts of the meters by day (LLM tokens, requests, bytes stored, transfer, texts embedded),
the totals and a CSV download; root names the account; a plain user sees their own cards
and token chart, without the account's series."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.browser.conftest import ROOT_KEY, Page, Seeded


def _account(url: str) -> tuple[str, str, str]:
    """A fresh account: its admin ivy writes two notes and runs a find; its user ulf
    searches once."""
    name = "usage-" + uuid.uuid4().hex[:6]
    with httpx.Client(base_url=url, headers={"X-API-Key": ROOT_KEY}, timeout=60) as root:
        ivy = root.post("/api/v1/admin/accounts", json={"account_id": name, "admin_user_id": "ivy"})
        ulf = root.post(
            f"/api/v1/admin/accounts/{name}/users", json={"user_id": "ulf", "role": "user"}
        )
    ivy_key, ulf_key = ivy.json()["result"]["user_key"], ulf.json()["result"]["user_key"]
    with httpx.Client(base_url=url, headers={"X-API-Key": ivy_key}, timeout=120) as http:
        for i in range(2):
            r = http.post(
                "/api/v1/content/write",
                json={
                    "uri": f"viking://resources/u/n{i}.md",
                    "content": f"# Note {i}\n\nMeters.\n",
                    "mode": "create",
                    "wait": True,
                },
            )
            assert r.status_code == 200, r.text
        assert http.post("/api/v1/search/find", json={"query": "meters"}).status_code == 200
    with httpx.Client(base_url=url, headers={"X-API-Key": ulf_key}, timeout=120) as http:
        assert http.post("/api/v1/search/search", json={"query": "meters"}).status_code == 200
    return name, ivy_key, ulf_key


def _series(url: str, key: str, name: str) -> dict[str, Any]:
    r = httpx.get(
        f"{url}/api/v1/admin/accounts/{name}/usage",
        params={"from": "30d", "granularity": "day"},
        headers={"X-API-Key": key},
        timeout=60,
    )
    series: dict[str, Any] = r.json()["result"]["series"]
    return series


def test_an_admin_sees_cards_charts_totals_and_downloads_the_csv(
    seeded: Seeded, console: Page, shot: Any
) -> None:
    name, ivy_key, _ = _account(seeded.url)
    console.sign_in_storage(ivy_key, seeded.url)
    page = console.open(seeded.url, "usage")
    counts = httpx.get(
        f"{seeded.url}/api/v1/console/dashboard/summary",
        headers={"X-API-Key": ivy_key},
        timeout=60,
    ).json()["result"]["context_counts"]
    assert counts["files"] >= 2  # two files, their directories' records too
    context = page.locator("#usage-context").inner_text()
    assert f"Files\n{counts['files']}" in context and f"Total\n{counts['total']}" in context
    retrievals = page.locator("#usage-today-retrievals").inner_text()
    assert "Find\n1" in retrievals and "Search\n1" in retrievals  # ulf's search counts too
    for chart in ("llm-tokens", "requests", "bytes-stored", "transfer", "embedded"):
        assert page.locator(f"#chart-{chart} rect.bar").count() >= 7, chart
    # the requests chart's bars are the series' requests per day
    series = _series(seeded.url, ivy_key, name)
    bars = page.locator("#chart-requests rect.bar").all()
    shown = sum(int(b.get_attribute("data-value") or 0) for b in bars)
    assert 0 < shown <= series["totals"]["requests"]  # the page's own reads came after
    stored = page.locator("#usage-totals tr[data-unit=bytes_stored] td").inner_text()
    assert stored.endswith("B")
    shot(page, "usage")

    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").click()
    text = Path(download.value.path()).read_text()
    assert text.splitlines()[0] == "period,account_id,user_id,unit,dims,value"
    assert f",{name},ivy,bytes_stored," in text

    page.get_by_label("Range").select_option("7")
    page.get_by_role("button", name="Show").click()
    page.wait_for_selector("body[data-ready=usage]")
    assert page.locator("#chart-requests rect.bar").count() == 7
    assert "days=7" in page.url
    assert not console.errors


def test_root_names_the_account_and_a_user_sees_their_own(seeded: Seeded, console: Page) -> None:
    name, _, ulf_key = _account(seeded.url)
    console.sign_in_storage(ROOT_KEY, seeded.url)
    page = console.open(seeded.url, "usage")
    assert page.get_by_text("Name an account to see its usage.").is_visible()
    page.get_by_label("Account").fill(name)
    page.get_by_role("button", name="Show").click()
    page.wait_for_selector("body[data-ready=usage]")
    assert page.locator("#chart-requests rect.bar").count() == 30
    assert f"account={name}" in page.url

    user = Page(console.context.browser.new_context())
    user.sign_in_storage(ulf_key, seeded.url)
    up = user.open(seeded.url, "usage")
    retrievals = up.locator("#usage-today-retrievals").inner_text()
    assert "Find\n0" in retrievals and "Search\n1" in retrievals  # ulf's own only
    assert up.locator("#chart-llm-tokens").count() == 1
    assert up.locator("#chart-requests").count() == 0  # no account series for a user
    assert not user.errors
    user.context.close()
