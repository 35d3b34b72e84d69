"""The console ships as a bundle built from its sources (scripts/console/build.mjs): the
bundle must be the build of the sources in the tree, and reference only files that exist."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[3] / "layers/common/python/skald/console"


def sources_hash(src: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p.relative_to(src).as_posix() for p in src.rglob("*.js")):
        digest.update(f"{path}\n".encode())
        digest.update((src / path).read_bytes())
        digest.update(b"\n")
    return digest.hexdigest()


def test_bundle_is_built_from_the_current_sources() -> None:
    bundle = (CONSOLE / "console.js").read_text()
    stamp = re.match(r"/\* skald console; sources sha256 ([0-9a-f]{64}) \*/", bundle)
    assert stamp, "console.js has no sources stamp: rebuild with `make console-assets`"
    assert stamp.group(1) == sources_hash(CONSOLE / "src"), (
        "console/src changed since console.js was built: run `make console-assets`"
    )


def test_bundle_imports_only_shipped_vendor_modules() -> None:
    bundle = (CONSOLE / "console.js").read_text()
    imports = set(re.findall(r'import\("(\./vendor/[^"]+)"\)', bundle))
    assert imports == {"./vendor/markdown.js", "./vendor/highlight.js", "./vendor/zip.js"}
    for rel in imports:
        assert (CONSOLE / rel).is_file(), rel
    # nothing is fetched from another origin at run time
    for path in [CONSOLE / "console.js", *(CONSOLE / "vendor").glob("*.js")]:
        text = path.read_text()
        assert not re.search(r"""(import\(|from)\s*["']https?:""", text), path.name
