"""Documents and media through openviking-sdk against a live `skald serve`: a folder of PDF,
DOCX, PPTX, XLSX, CSV, HTML, EPUB, notebook, image and audio files is added, parsed and found
by questions about its content; `read` gives the text, `download` the original bytes; an
encrypted PDF, a corrupt DOCX and an unknown binary are stored and marked; and no sidecar or
index record holds binary bytes. Also: media placement and distinct roots for repeated adds."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openviking_sdk import SyncHTTPClient
from openviking_sdk.errors import InvalidArgumentError

from skald.domain.text.decoding import decode_text, is_clean_text
from tests.api.conftest import make_client
from tests.fixtures import documents as d
from tests.support.server import SkaldServer

ROOT = "viking://resources/library"
# file name -> (its bytes, a question about it, a phrase its read text contains)
FILES: dict[str, tuple[bytes, str, str]] = {
    "lakes.pdf": (
        d.pdf(
            [
                "Kayak rentals on Lake Bled cost forty euros per day.",
                "The lake freezes in January.",
            ],
            title="Lake Guide",
        ),
        "how much does renting a kayak on Lake Bled cost",
        "forty euros per day",
    ),
    "handbook.docx": (
        d.docx(
            "Employee Handbook",
            [
                ("Onboarding", "New hires receive a laptop and a security badge on day one."),
                ("Leave", "Every employee gets twenty-five days of paid vacation."),
            ],
            [["Team", "Office"], ["Platform", "Oslo"]],
        ),
        "how many days of paid vacation do employees get",
        "twenty-five days",
    ),
    "results.pptx": (
        d.pptx(
            [
                (
                    "Quarterly results",
                    ["Revenue grew twelve percent", "Customer churn fell to two percent"],
                )
            ],
            notes="Mention the new warehouse in Rotterdam.",
        ),
        "did customer churn fall last quarter",
        "churn fell",
    ),
    "budget.xlsx": (
        d.xlsx(
            {
                "Camping budget": [
                    ["Item", "Cost"],
                    ["Tent", 120],
                    ["Sleeping bag", 80],
                    ["Camping stove", 45],
                ]
            }
        ),
        "camping gear budget tent sleeping bag stove cost",
        "| Tent | 120 |",
    ),
    "cities.csv": (
        b"city,country,population\nReykjavik,Iceland,140000\nTromso,Norway,77000\n",
        "population of Reykjavik in Iceland",
        "| Reykjavik | Iceland |",
    ),
    "page.html": (
        b"<html><head><title>Glacier tours</title></head><body>"
        b"<nav>Home | Shop | Login</nav><main><h1>Glacier hiking tours</h1>"
        b"<p>Guided glacier hikes on Vatnajokull start every morning at eight.</p>"
        b"<img src='data:image/png;base64,iVBORw0KGgo=' alt='crampons'></main>"
        b"<footer>Copyright 2024</footer></body></html>",
        "when do guided glacier hikes start",
        "start every morning at eight",
    ),
    "stories.epub": (
        d.epub(
            "Sea Stories",
            [
                ("The Storm", "The lighthouse keeper watched the storm wreck the fishing fleet."),
                ("Calm", "Morning came quietly over the harbour."),
            ],
        ),
        "lighthouse keeper and the storm",
        "lighthouse keeper watched the storm",
    ),
    "analysis.ipynb": (
        d.notebook(
            "# Rainfall analysis\n\nWe fit a linear regression of "
            "monthly rainfall against temperature.",
            "print(model.coef_)",
            "[0.42]\n",
        ),
        "regression of rainfall against temperature notebook",
        "linear regression of monthly rainfall",
    ),
}
MEDIA: dict[str, bytes] = {
    "photo.jpg": d.jpeg_with_exif("2023:04:01 09:30:00"),
    "chart.png": d.png(120, 80),
    "chime.wav": d.wav(2.0),
    "clip.mp4": d.mp4(5.5),
}
BROKEN: dict[str, tuple[bytes, str]] = {
    "secret.pdf": (d.encrypted_pdf(["Classified launch codes"]), "encrypted"),
    "broken.docx": (b"PK\x03\x04 this is not really a zip archive", "corrupt DOCX"),
    "blob.bin": (bytes(range(256)) * 8, "binary"),
}
MAGIC = (b"%PDF", b"\x89PNG", b"PK\x03\x04", b"\xff\xd8\xff", b"RIFF", b"FlateDecode", b"IHDR")


@pytest.fixture(scope="module")
def library(
    dev_server: SkaldServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SyncHTTPClient, str, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("docs") / "library"
    folder.mkdir()
    for name, (data, _, _) in FILES.items():
        (folder / name).write_bytes(data)
    for name, data in MEDIA.items():
        (folder / name).write_bytes(data)
    for name, (data, _) in BROKEN.items():
        (folder / name).write_bytes(data)
    account = f"docs-{int(time.time() * 1000)}"
    client = make_client(dev_server.url, account=account, user="alice")
    res = client.add_resource(str(folder), wait=True)
    assert res["root_uri"] == ROOT, res
    yield client, account, res
    client.close()


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_document_is_found_and_read_as_text(
    library: tuple[SyncHTTPClient, str, dict[str, Any]], name: str
) -> None:
    client, _, _ = library
    data, question, phrase = FILES[name]
    uri = f"{ROOT}/{name}"
    hits = client.find(question, target_uri=ROOT, limit=3, options={"level": 2})["resources"]
    assert hits and hits[0]["uri"] == uri, [(h["uri"], h["score"]) for h in hits]
    text = client.read(uri)
    assert phrase in text
    assert not any(m.decode("latin-1") in text for m in MAGIC)
    assert client.download_bytes(uri) == data
    parsed = client.stat(uri)["parsed"]
    assert parsed["status"] == "extracted" and parsed["kind"] == "document", parsed


def test_structure_survives_as_markdown(
    library: tuple[SyncHTTPClient, str, dict[str, Any]],
) -> None:
    client, _, _ = library
    docx = client.read(f"{ROOT}/handbook.docx")
    assert "# Employee Handbook" in docx and "## Leave" in docx
    assert "| Platform | Oslo |" in docx
    pdf = client.read(f"{ROOT}/lakes.pdf")
    assert pdf.startswith("# Lake Guide") and "## Page 2" in pdf
    assert "Notes: Mention the new warehouse" in client.read(f"{ROOT}/results.pptx")
    page = client.read(f"{ROOT}/page.html")
    assert "Login" not in page and "Copyright" not in page and "base64" not in page
    # raw keeps a text source as it is; a binary one has no other text than its parse
    assert client.read_raw(f"{ROOT}/cities.csv").startswith("city,country,population")
    stat = client.stat(f"{ROOT}/lakes.pdf")["parsed"]
    assert stat["format"] == "pdf" and stat["pages"] == 2 and stat["title"] == "Lake Guide"


def test_media_are_described_from_metadata(
    library: tuple[SyncHTTPClient, str, dict[str, Any]],
) -> None:
    client, _, _ = library
    photo = client.read(f"{ROOT}/photo.jpg")
    assert "320 × 200 pixels" in photo and "2023-04-01 09:30:00" in photo
    assert "Canon EOS 5D" in photo
    assert client.download_bytes(f"{ROOT}/photo.jpg") == MEDIA["photo.jpg"]
    stat = client.stat(f"{ROOT}/chime.wav")["parsed"]
    assert stat["kind"] == "audio" and stat["duration_s"] == 2.0
    assert "2.0 s" in client.read(f"{ROOT}/chime.wav")
    video = client.stat(f"{ROOT}/clip.mp4")["parsed"]
    assert video["kind"] == "video" and video["duration_s"] == 5.5
    hits = client.find(
        "photo taken with a Canon camera", target_uri=ROOT, limit=3, options={"level": 2}
    )["resources"]
    assert hits[0]["uri"] == f"{ROOT}/photo.jpg"


def test_unparseable_files_are_stored_and_marked(
    library: tuple[SyncHTTPClient, str, dict[str, Any]],
) -> None:
    client, _, res = library
    task = client.get_task(str(res["task_id"]))
    assert task is not None and task["status"] == "completed", task
    marked = {m["uri"]: m["reason"] for m in task["result"]["not_indexed"]}
    assert res["meta"]["not_indexed"] == task["result"]["not_indexed"]
    assert set(marked) == {f"{ROOT}/{n}" for n in BROKEN}
    for name, (data, reason) in BROKEN.items():
        uri = f"{ROOT}/{name}"
        assert reason in marked[uri]
        assert client.download_bytes(uri) == data
        parsed = client.stat(uri)["parsed"]
        assert parsed["status"] in ("unparseable", "binary") and reason in str(parsed), parsed
        text = client.read(uri)
        assert text.startswith(f"[{name}:") and "content/download" in text
    secret = client.stat(f"{ROOT}/secret.pdf")["parsed"]
    assert secret["status"] == "unparseable" and "password" in secret["reason"]
    # never indexed: no query reaches them, however close to their bytes
    for query in ("Classified launch codes", "FlateDecode stream endobj", "PK zip archive"):
        uris = [h["uri"] for h in client.find(query, target_uri=ROOT, limit=20)["resources"]]
        assert not any(u.endswith(tuple(BROKEN)) for u in uris), uris


def test_overview_lists_every_file_by_its_text(
    library: tuple[SyncHTTPClient, str, dict[str, Any]],
) -> None:
    client, _, _ = library
    overview = client.overview(ROOT)
    for name in [*FILES, *MEDIA, *BROKEN]:
        assert f"- {name}" in overview, name
    assert "secret.pdf: PDF document; not parsed: encrypted" in overview
    assert "photo.jpg: photo.jpg: JPEG image, 320 × 200 pixels" in overview
    assert is_clean_text(overview) and "%PDF" not in overview and "IHDR" not in overview


def test_no_sidecar_or_index_record_holds_binary(
    library: tuple[SyncHTTPClient, str, dict[str, Any]], dev_server: SkaldServer
) -> None:
    """Greps what processing wrote for the folder: every sidecar blob and every index record
    (text and abstract) is valid text with no control bytes and no binary signature."""
    _, account, _ = library
    blob_dir = dev_server.data_dir / "blobs" / account / "resources" / "library"
    sidecars = [p for p in blob_dir.rglob(".*") if p.is_file()]
    assert {p.name for p in sidecars} >= {
        ".abstract.md",
        ".overview.md",
        ".lakes.pdf.parsed.json",
        ".photo.jpg.parsed.json",
        ".secret.pdf.parsed.json",
        ".blob.bin.parsed.json",
    }
    for path in sidecars:
        raw = path.read_bytes()
        text = decode_text(raw)
        assert text is not None and is_clean_text(text), path
        assert not any(m in raw for m in MAGIC), path
    conn = sqlite3.connect(f"file:{dev_server.data_dir / 'index.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT uri, text, abstract FROM records WHERE account = ?", (account,)
        ).fetchall()
    finally:
        conn.close()
    indexed = {uri for uri, _, _ in rows}
    assert f"{ROOT}/lakes.pdf" in indexed and f"{ROOT}/photo.jpg" in indexed
    assert not indexed & {f"{ROOT}/{n}" for n in BROKEN}
    for uri, text, abstract in rows:
        for value in (text, abstract):
            assert is_clean_text(value), uri
            assert not any(m.decode("latin-1") in value for m in MAGIC), (uri, value[:80])


def test_a_media_file_added_alone_goes_under_its_media_directory(
    client: SyncHTTPClient, tmp_path: Path
) -> None:
    day = time.strftime("%Y/%m/%d", time.gmtime())
    photo = tmp_path / "sunset.png"
    photo.write_bytes(d.png(32, 32, "orange"))
    first = client.add_resource(str(photo), wait=True)["root_uri"]
    assert first == f"viking://resources/images/{day}/sunset"
    second = client.add_resource(str(photo), wait=True)["root_uri"]
    assert second == f"viking://resources/images/{day}/sunset_1"
    assert client.download_bytes(f"{second}/sunset.png") == photo.read_bytes()
    sound = tmp_path / "bell.wav"
    sound.write_bytes(d.wav(1.0))
    assert (
        client.add_resource(str(sound), wait=True)["root_uri"]
        == f"viking://resources/audio/{day}/bell"
    )
    assert "32 × 32 pixels" in client.read(f"{first}/sunset.png")


def test_the_same_source_added_twice_gets_distinct_roots(
    client: SyncHTTPClient, tmp_path: Path, sample_dir: Path
) -> None:
    note = tmp_path / "notes.md"
    note.write_text("# Notes\n\nFirst version.\n")
    assert client.add_resource(str(note), wait=True)["root_uri"] == "viking://resources/notes"
    note.write_text("# Notes\n\nSecond version.\n")
    assert client.add_resource(str(note), wait=True)["root_uri"] == "viking://resources/notes_1"
    assert client.add_resource(str(note), wait=True)["root_uri"] == "viking://resources/notes_2"
    assert "First version" in client.read("viking://resources/notes/notes.md")
    assert "Second version" in client.read("viking://resources/notes_1/notes.md")
    # a folder, and a parent: the same rule; an explicit target is used as given
    assert client.add_resource(str(sample_dir), wait=True)["root_uri"] == "viking://resources/guide"
    assert (
        client.add_resource(str(sample_dir), wait=True)["root_uri"] == "viking://resources/guide_1"
    )
    client.mkdir("viking://resources/shelf")
    for expected in ("notes", "notes_1"):
        res = client.add_resource(str(note), parent="viking://resources/shelf", wait=True)
        assert res["root_uri"] == f"viking://resources/shelf/{expected}"
    for _ in range(2):
        res = client.add_resource(str(note), to="viking://resources/fixed", wait=True)
        assert res["root_uri"] == "viking://resources/fixed"


def test_find_with_an_image_needs_a_multimodal_embedder(client: SyncHTTPClient) -> None:
    with pytest.raises(InvalidArgumentError, match="multimodal embedder"):
        client.find("", image="https://example.com/cat.png")


def test_a_parsed_file_keeps_its_text_when_copied_and_leaves_nothing_when_removed(
    client: SyncHTTPClient, account: str, dev_server: SkaldServer, tmp_path: Path
) -> None:
    report = tmp_path / "report.pdf"
    report.write_bytes(d.pdf(["Quarterly audit of the Lisbon warehouse."]))
    root = client.add_resource(str(report), wait=True)["root_uri"]
    copied = httpx.post(
        f"{dev_server.url}/api/v1/fs/cp",
        json={"from_uri": f"{root}/report.pdf", "to_uri": f"{root}/copy.pdf"},
        headers={"X-OpenViking-Account": account, "X-OpenViking-User": "alice"},
    )
    assert copied.status_code == 200, copied.text  # the SDK has no cp
    client.mv(f"{root}/report.pdf", f"{root}/moved.pdf")
    client.wait_processed()
    for name in ("copy.pdf", "moved.pdf"):
        assert "Lisbon warehouse" in client.read(f"{root}/{name}")
        assert client.stat(f"{root}/{name}")["parsed"]["status"] == "extracted"
    client.rm(f"{root}/copy.pdf")
    client.rm(f"{root}/moved.pdf")
    folder = dev_server.data_dir / "blobs" / account / "resources" / "report"
    assert not list(folder.glob(".*.parsed.json"))
