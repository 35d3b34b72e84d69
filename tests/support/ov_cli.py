"""The real `ov` CLI (the Rust binary inside the `openviking` 0.5.2 wheel) as a test client.

The wheel is downloaded once with `pip download --no-deps` into a cache that survives between
runs (`SKALD_TEST_CACHE`, default `~/.cache/skald-tests`); only `openviking/bin/ov` and the
`liblzma` it links (`openviking.libs/`) are extracted. Each client gets its own HOME, so its
`~/.openviking` config is private to the test."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OV_VERSION = "0.5.2"
CACHE = Path(os.environ.get("SKALD_TEST_CACHE") or Path.home() / ".cache" / "skald-tests")
_BOX = re.compile(r"[│╭╮╰╯─]")


class Unavailable(Exception):
    """The binary cannot be had here (no network, another platform): the tests skip."""


def install(cache: Path = CACHE) -> Path:
    """Returns the directory holding `openviking/bin/ov` and `openviking.libs/`."""
    if sys.platform != "linux" or platform.machine() not in {"x86_64", "AMD64"}:
        raise Unavailable(f"the ov {OV_VERSION} wheel is built for linux x86_64 only")
    root = cache / f"ov-{OV_VERSION}"
    binary = root / "openviking" / "bin" / "ov"
    if binary.exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    # Test workers may get here at once on a fresh cache: one downloads, the others wait.
    with (cache / f"ov-{OV_VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return root
        return _download(cache, root)


def _download(cache: Path, root: Path) -> Path:
    wheels = sorted(cache.glob(f"openviking-{OV_VERSION}-*.whl"))
    if not wheels:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--quiet",
                f"openviking=={OV_VERSION}",
                "-d",
                str(cache),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        wheels = sorted(cache.glob(f"openviking-{OV_VERSION}-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise Unavailable(
                f"pip download openviking=={OV_VERSION} failed: "
                f"{(proc.stderr or proc.stdout).strip()[-500:]}"
            )
    staging = root.with_name(root.name + ".partial")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        members = [
            n
            for n in wheel.namelist()
            if n == "openviking/bin/ov" or n.startswith("openviking.libs/")
        ]
        wheel.extractall(staging, members)
    (staging / "openviking" / "bin" / "ov").chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP)
    staging.replace(root)  # a concurrent or interrupted run never sees half a tree
    return root


@dataclass
class Ov:
    """One configured `ov`: its own HOME, pointed at one server."""

    root: Path
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    def __call__(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 180,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LD_LIBRARY_PATH": str(self.root / "openviking.libs"),
            "NO_COLOR": "1",
            "TERM": "dumb",
            "COLUMNS": "200",
            **self.env,
            **(env or {}),
        }
        proc = subprocess.run(
            [str(self.root / "openviking" / "bin" / "ov"), *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"ov {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def out(self, *args: str) -> str:
        return self(*args).stdout

    def json(self, *args: str) -> Any:
        """`-o json` output: the CLI's own wrapper `{"ok": true, "result": ...}`."""
        stdout = self("-o", "json", *args).stdout
        body = "\n".join(line for line in stdout.splitlines() if not line.startswith("cmd: "))
        payload = json.loads(body)
        assert payload["ok"] is True, payload
        return payload["result"]

    def fails(self, *args: str) -> str:
        """Runs a command that must fail; returns its message on one line, box drawing and
        line wrapping removed."""
        proc = self(*args, check=False)
        assert proc.returncode != 0, proc.stdout
        return flat(proc.stdout + " " + proc.stderr)

    def configure(self, url: str, *extra: str) -> Ov:
        self.home.mkdir(parents=True, exist_ok=True)
        self("language", "en")
        self(
            "config", "add", "custom", "--name", "t", "--url", url, "--activate", "--force", *extra
        )
        return self


def flat(text: str) -> str:
    return " ".join(_BOX.sub(" ", text).split())
