"""Page-load budget: each console page, loaded afresh in a new tab, shows its first data
within 300 ms on loopback. Pages load lazily (a tree level, a page of 200 entries, one
session), so the time does not grow with the corpus; bench/console_load.py measures the same
pages against a 10k-record corpus.

What a fresh tab costs before any page code runs depends on the machine at that moment: a
bare static file takes ~20 ms on an idle machine and 100-300 ms on a shared, busy one, and
everything else slows down alike. So each page's best load counts from the best load of a
bare static file measured alongside, and when that file itself takes longer than
QUIET_BARE_MS (the machine is contended) the budget grows in the same proportion.
"""

from __future__ import annotations

import statistics

from tests.browser.conftest import ROOT_KEY, Page, Seeded

BUDGET_MS = 300
QUIET_BARE_MS = 100
LOADS = 5


def load_times(console: Page, url: str, route: str) -> list[int]:
    times = []
    for _ in range(LOADS):
        page = console.context.new_page()
        page.goto(f"{url}/console/#/{route}")
        page.wait_for_selector("body[data-ready]", state="attached", timeout=30_000)
        times.append(int(page.evaluate("document.body.dataset.readyMs")))
        page.close()
    return times


def bare_times(console: Page, url: str) -> list[int]:
    """A static file in a fresh tab: the machine's cost of a navigation."""
    times = []
    for _ in range(LOADS):
        page = console.context.new_page()
        page.goto(f"{url}/console/favicon.svg", wait_until="load")
        times.append(int(page.evaluate("performance.now()")))
        page.close()
    return times


def test_pages_load_within_budget(seeded: Seeded, console: Page) -> None:
    console.sign_in_storage(seeded.admin_key, seeded.url)
    routes = {
        "browse": "browse?uri=viking://resources/guide",
        "browse 230 entries": f"browse?uri={seeded.big_dir}",
        "read": "browse?uri=viking://resources/guide/api/client.py",
        "search": "search?q=signing%20key%20rotation",
        "sessions": f"sessions?sid={seeded.session_id}&archive=archive_001",
        "memories": "memories?type=preferences",
        "operations": "operations",
    }
    base = bare_times(console, seeded.url)
    results = {name: load_times(console, seeded.url, route) for name, route in routes.items()}
    root = Page(console.context.browser.new_context())
    root.sign_in_storage(ROOT_KEY, seeded.url)
    results["admin (root)"] = load_times(root, seeded.url, "admin?account=console")
    root.context.close()
    base += bare_times(console, seeded.url)
    floor = min(base)
    budget = BUDGET_MS * max(1.0, floor / QUIET_BARE_MS)
    lines = [f"  {'bare static file':20} best {floor:4d} ms (budget {budget:.0f} ms)"]
    lines += [f"  {name:20} best {min(t):4d} ms  median {statistics.median(t):6.0f} ms  "
              f"console's own {min(t) - floor:4d} ms" for name, t in results.items()]
    report = "\n".join(lines)
    print("\nconsole page loads (fresh tab to first data on screen):\n" + report)
    slow = [name for name, t in results.items() if min(t) - floor >= budget]
    assert not slow, f"over {budget:.0f} ms: {slow}\n{report}"
