"""Shallow clones with the `git` client, held to the address rules: the host is resolved and
checked here and git is told to connect to that address only (`http.curloptResolve`), never
to follow a redirect, to speak http(s) only, to use no proxy, no credential helper and no
configuration of the machine. The clone runs under the fetch's time limit and is killed when
its size passes the byte limit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from skald.adapters.fetch.guarded_http import Deadline, resolve
from skald.domain.sources.netguard import FetchFailed, FetchLimits

_POLL_S = 0.1


def _tree_size(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def read_tree(
    root: Path, limits: FetchLimits, *, skip: frozenset[str] = frozenset({".git"})
) -> list[tuple[str, bytes]]:
    """Regular files below `root` (links and `skip` folders left out), under the limits."""
    out: list[tuple[str, bytes]] = []
    total = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if d not in skip and not os.path.islink(os.path.join(dirpath, d))
        )
        for name in sorted(files):
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            if len(out) >= limits.max_files:
                raise FetchFailed(
                    "too_large",
                    f"The repository has more than {limits.max_files} files",
                    {"limit": limits.max_files},
                )
            data = path.read_bytes()
            total += len(data)
            if total > limits.max_bytes:
                raise FetchFailed(
                    "too_large",
                    f"The repository's files are above the limit of {limits.max_bytes} bytes",
                    {"limit": limits.max_bytes},
                )
            out.append((path.relative_to(root).as_posix(), data))
    return out


class GitCloner:
    def clone(self, url: str, ref: str | None, limits: FetchLimits) -> list[tuple[str, bytes]]:
        git = shutil.which("git")
        if git is None:
            raise FetchFailed(
                "git",
                "This worker has no git client; repositories on GitHub "
                "and GitLab are fetched as archives, others need git",
            )
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in {"http", "https"} or not parts.hostname:
            raise FetchFailed("invalid", f"Not an http(s) repository URL: {url}")
        port = parts.port or (443 if scheme == "https" else 80)
        deadline = Deadline(limits.timeout_s)
        ip = resolve(parts.hostname, port, limits, deadline)
        pinned = f"[{ip}]" if ip.version == 6 else str(ip)
        with tempfile.TemporaryDirectory(prefix="skald-git-") as tmp:
            home = Path(tmp, "home")
            home.mkdir()
            dest = Path(tmp, "repo")
            cmd = [
                git,
                "-c",
                f"http.curloptResolve={parts.hostname}:{port}:{pinned}",
                "-c",
                "http.followRedirects=false",
                "-c",
                "protocol.allow=never",
                "-c",
                "protocol.http.allow=always",
                "-c",
                "protocol.https.allow=always",
                "-c",
                "http.proxy=",
                "-c",
                "credential.helper=",
                "-c",
                "core.symlinks=false",
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "submodule.recurse=false",
                "clone",
                "--depth",
                "1",
                "--single-branch",
                "--no-tags",
                "--quiet",
                *(["--branch", ref] if ref else []),
                "--",
                url,
                str(dest),
            ]
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(home),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_ASKPASS": "/bin/false",
                "LANG": "C",
                "GIT_PROTOCOL_FROM_USER": "0",
            }
            self._run(cmd, env, dest, limits, deadline, url)
            return read_tree(dest, limits)

    @staticmethod
    def _run(
        cmd: list[str],
        env: dict[str, str],
        dest: Path,
        limits: FetchLimits,
        deadline: Deadline,
        url: str,
    ) -> None:
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )
            try:
                while proc.poll() is None:
                    if time.monotonic() > deadline.end:
                        raise FetchFailed(
                            "timeout",
                            f"Timed out cloning {url} after {limits.timeout_s:g}s",
                            {"url": url},
                        )
                    if dest.exists() and _tree_size(dest) > 2 * limits.max_bytes:
                        raise FetchFailed(
                            "too_large",
                            f"The repository is above the limit of {limits.max_bytes} bytes",
                            {"limit": limits.max_bytes},
                        )
                    time.sleep(_POLL_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if proc.returncode != 0:
                err.seek(0)
                raise _clone_error(err.read().decode("utf-8", "replace"), url)


def _clone_error(stderr: str, url: str) -> FetchFailed:
    text = " ".join(line.strip() for line in stderr.splitlines() if line.strip())[-500:]
    low = text.lower()
    if "connection refused" in low or "couldn't connect" in low or "failed to connect" in low:
        return FetchFailed("refused", f"Connection refused cloning {url}", {"detail": text})
    if "redirect" in low:
        return FetchFailed(
            "redirects",
            f"{url} redirects; repository redirects are not followed, use the final URL",
            {"detail": text},
        )
    if "timed out" in low:
        return FetchFailed("timeout", f"Timed out cloning {url}", {"detail": text})
    if "remote branch" in low and "not found" in low:
        return FetchFailed("git", f"Branch or tag not found in {url}: {text}")
    if "dumb http transport does not support shallow" in low:
        return FetchFailed(
            "git", f"{url} serves only git's dumb http protocol, which cannot be cloned shallowly"
        )
    status = next(
        (w for w in low.replace(":", " ").split() if w.isdigit() and len(w) == 3 and w[0] in "45"),
        None,
    )
    if status and ("requested url returned error" in low or "http" in low):
        return FetchFailed("http_status", f"HTTP {status} from {url}", {"status": int(status)})
    return FetchFailed("git", f"git clone of {url} failed: {text or 'no detail'}")
