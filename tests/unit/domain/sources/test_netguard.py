"""The address rules of remote fetches (SSRF) and how a source URL is read."""

from __future__ import annotations

import ipaddress

import pytest

from skald.domain.errors import InvalidArgument
from skald.domain.sources.netguard import FetchFailed, FetchLimits, blocked_reason, check_address
from skald.domain.sources.remote import parse_source
from skald.domain.sources.repofiles import select_files


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "shared address space (private)"),
        ("169.254.169.254", "cloud metadata endpoint"),
        ("169.254.170.2", "cloud metadata endpoint"),
        ("fd00:ec2::254", "cloud metadata endpoint"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00::1", "unique local (private)"),
        ("fc12::1", "unique local (private)"),
        ("0.0.0.0", "unspecified address"),
        ("::", "unspecified address"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),  # Python files 240/4 as private
        ("192.0.2.1", "private"),
    ],
)
def test_internal_addresses_are_refused_with_their_reason(address: str, reason: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    ("address", "inner"),
    [
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "cloud metadata endpoint"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata endpoint"),  # NAT64 of 169.254.169.254
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_ipv4_inside_ipv6_is_judged_as_the_ipv4_it_carries(address: str, inner: str) -> None:
    reason = blocked_reason(ipaddress.ip_address(address))
    assert reason is not None and reason.startswith(inner)


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "140.82.112.3", "2606:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address: str) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) is None


def test_loopback_passes_only_when_allowed_and_metadata_never() -> None:
    assert blocked_reason(ipaddress.ip_address("127.0.0.1"), allow_loopback=True) is None
    assert blocked_reason(ipaddress.ip_address("::ffff:127.0.0.1"), allow_loopback=True) is None
    assert blocked_reason(ipaddress.ip_address("10.0.0.1"), allow_loopback=True) == "private"
    assert (
        blocked_reason(ipaddress.ip_address("169.254.169.254"), allow_loopback=True)
        == "cloud metadata endpoint"
    )
    with pytest.raises(FetchFailed) as exc:
        check_address(
            "metadata.internal",
            ipaddress.ip_address("169.254.169.254"),
            FetchLimits(allow_loopback=True),
        )
    assert exc.value.cause == "blocked" and "169.254.169.254" in exc.value.message


def test_sources_are_read_as_pages_or_repositories() -> None:
    page = parse_source("https://example.com/docs/intro.html?x=1#top")
    assert (page.kind, page.name, page.url) == (
        "page",
        "intro",
        "https://example.com/docs/intro.html?x=1",
    )
    assert parse_source("https://example.com/").name == "example_com"
    gh = parse_source("https://github.com/volcengine/OpenViking")
    assert (gh.kind, gh.root_parts, gh.url, gh.ref) == (
        "git",
        ("volcengine", "OpenViking"),
        "https://github.com/volcengine/OpenViking.git",
        None,
    )
    tree = parse_source("https://github.com/o/r/tree/v1.2/docs/api")
    assert (tree.ref, tree.subpath) == ("v1.2", "docs/api")
    lab = parse_source("https://gitlab.com/grp/proj/-/tree/main/src")
    assert (lab.root_parts, lab.ref, lab.subpath) == (("grp", "proj"), "main", "src")
    ssh = parse_source("git@github.com:volcengine/OpenViking.git")
    assert ssh.url == "https://github.com/volcengine/OpenViking.git"
    other = parse_source("http://127.0.0.1:8000/team/tools.git")
    assert (other.kind, other.root_parts, other.url) == (
        "git",
        ("team", "tools"),
        "http://127.0.0.1:8000/team/tools.git",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "git://example.com/r.git",
        "git@example.com:o/r.git",
        "https://user:pw@example.com/x",
        "ftp://example.com/x",
        "https://github.com/o/r/issues/3",
        "http://host:99999/x",
    ],
)
def test_unfetchable_sources_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_source(bad)


def test_repository_files_are_selected_by_subpath_excludes_and_content() -> None:
    files = [
        ("README.md", b"# Tools"),
        ("docs/a.md", b"a"),
        ("docs/build/x.md", b"x"),
        ("docs/logo.bin", b"\x00\x01\x02binary"),
        ("docs/guide.pdf", b"%PDF-1.4 ..."),
        ("node_modules/m/index.js", b"x"),
        ("src/app.py", b"print(1)"),
    ]
    picked = select_files(files, exclude="build/")
    assert [p for p, _ in picked.files] == [
        "README.md",
        "docs/a.md",
        "docs/guide.pdf",
        "src/app.py",
    ]
    assert picked.skipped_binary == 1
    sub = select_files(files, subpath="docs", include="*.md")
    assert [p for p, _ in sub.files] == ["a.md", "build/x.md"]


def test_a_repository_url_may_name_a_subpath_after_dot_git() -> None:
    src = parse_source("https://git.example.org/team/tools.git/docs/api")
    assert (src.kind, src.url, src.subpath) == (
        "git",
        "https://git.example.org/team/tools.git",
        "docs/api",
    )
