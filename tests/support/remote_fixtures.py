"""A loopback web site and git server for remote-source tests: pages, redirects, errors, a
slow and a large answer, and repositories served over git's smart http (`git http-backend`)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Page = tuple[int, dict[str, str], bytes]


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return out.stdout.decode()


def make_repo(root: Path, name: str, files: dict[str, bytes], *, tag: str | None = None) -> Path:
    """A bare repository `root/<name>.git` whose main branch holds `files`."""
    work = root / f"{name}-work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    commit_files(work, files, "initial")
    if tag:
        git(work, "tag", tag)
    bare = root / f"{name}.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    return bare


def commit_files(work: Path, files: Mapping[str, bytes | None], message: str) -> None:
    for rel, data in files.items():
        path = work / rel
        if data is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)


def push_bare(root: Path, name: str) -> None:
    """Pushes the work tree of `name` to its bare repository."""
    git(root / f"{name}-work", "push", "-q", str(root / f"{name}.git"), "HEAD:main")


class Site:
    def __init__(self, git_root: Path) -> None:
        self.git_root = git_root
        self.pages: dict[str, Page | Callable[[], Page]] = {}
        self.hits: dict[str, int] = {}
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def page(
        self,
        path: str,
        body: bytes | str,
        ctype: str = "text/html; charset=utf-8",
        status: int = 200,
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.pages[path] = (status, {"Content-Type": ctype}, data)

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.pages[path] = (status, {"Location": location}, b"")


class _SiteHandler(BaseHTTPRequestHandler):
    """Serves `site`: its pages, and its git repositories under /git/."""

    protocol_version = "HTTP/1.0"
    site: Site  # set on the subclass `_handler` makes for one site

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def _serve(self) -> None:
        path = self.path.split("?", 1)[0]
        self.site.hits[path] = self.site.hits.get(path, 0) + 1
        if path.startswith("/git/"):
            self._git()
            return
        entry = self.site.pages.get(path)
        if entry is None:
            self.send_error(404)
            return
        status, headers, body = entry() if callable(entry) else entry
        self._send(status, headers.items(), body)

    def _git(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        out = subprocess.run(
            ["git", "http-backend"],
            input=body,
            env=self._cgi_env(path, query, body),
            capture_output=True,
            check=False,
        ).stdout
        self._send(*_cgi_response(out))

    def _cgi_env(self, path: str, query: str, body: bytes) -> dict[str, str]:
        """The CGI environment of `git http-backend` for this request."""
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.site.git_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path[len("/git") :],
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        return env

    def _send(self, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _cgi_response(out: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of a CGI program's output."""
    head, _, payload = out.partition(b"\r\n\r\n")
    status = 200
    headers: list[tuple[str, str]] = []
    for line in head.decode("latin-1").split("\r\n"):
        if not line:
            continue
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            headers.append((key, value.strip()))
    return status, headers, payload


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(_SiteHandler):
        pass

    Handler.site = site
    return Handler


@contextmanager
def serve_site(git_root: Path) -> Iterator[Site]:
    site = Site(git_root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    server.daemon_threads = True
    site.server = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()


def slow(seconds: float, body: bytes = b"late") -> Callable[[], Page]:
    def answer() -> Page:
        time.sleep(seconds)
        return 200, {"Content-Type": "text/plain"}, body

    return answer
