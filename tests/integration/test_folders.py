"""Watched folders over real node processes on 127.0.0.1 (issue 35, ``specs/folders.md``).

A: anchor, hosts corpus ``family`` and embeds.  B: trusted, watches a folder on its disk and has
no RAG store and no embedder of its own: every file goes to the corpus on A through the bus.
C: a plain member, whose ``watch add`` is refused.  The folder holds shared PDFs, notes written
here, a hidden file, an office lock file and an ignored folder.

The steps run in file order on one mesh; after each, ``docs`` and a query show exactly the
folder's current content (:func:`assert_mirrors`).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.blobs.cid import blob_cid
from hearthnet.frontends.client.client import Client
from hearthnet.services.rag.folders.rules import read_ignore
from hearthnet.services.rag.folders.scan import walk
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.shared_data import PDF_DIR

CORPUS = "family"
PDFS = [PDF_DIR / "en_paper_creativity_in_ml.pdf", PDF_DIR / "multicolumn_2col_latex.pdf"]
HALF = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
NOTE_OLD = "The heat pump in the cellar is serviced every October by Anna Lindqvist.\n"
NOTE_NEW = "The heat pump in the cellar is now serviced every May by Bert Okafor.\n"
NOTE_QUESTION = "who services the heat pump in the cellar"
WAIT = 600.0
"""Seconds a step may take on two cores shared with four other engineers (each step takes a few)."""
pytestmark = pytest.mark.timeout(2 * WAIT)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("folders"))
    m.env["RAG_EMBED_TIMEOUT_SECONDS"] = "300"
    try:
        a = m.add("a")
        b = m.add("b", env={"HEARTHNET_RAG": "0", "HEARTHNET_EMBEDDING": "0"})
        c = m.add("c", env={"HEARTHNET_RAG": "0", "HEARTHNET_EMBEDDING": "0"})
        config = b.home / "config.toml"  # a longer settle window: the half-written step holds a file open
        config.write_text(config.read_text().replace("[rag]\n", "[rag]\nfolder_settle_seconds = 3.0\n", 1))
        m.found(a)
        m.invite(a, b, "trusted")
        m.invite(a, c, "member")
        m.wait_full_mesh(timeout=120)
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def folder(mesh: LocalMesh) -> Path:
    root = mesh.root / "papers"
    (root / "notes").mkdir(parents=True)
    (root / "private").mkdir()
    for pdf in PDFS:
        shutil.copy(pdf, root / pdf.name)
    (root / "notes" / "heating.txt").write_text(NOTE_OLD)
    (root / ".hidden.txt").write_text("a hidden note is never indexed\n")
    (root / "notes" / "~$heating.txt").write_text("an office lock file\n")
    (root / "private" / "diary.txt").write_text("the ignored folder's diary\n")
    (root / ".hearthnetignore").write_text("private/\n")
    return root


def expected(folder: Path) -> dict[str, str]:
    """doc_cid -> path of every document the folder holds now (as the watcher's rules say)."""
    return {
        blob_cid((folder / rel).read_bytes()): str(folder / rel) for rel in walk(folder, read_ignore(folder))
    }


def docs(node: MeshNode) -> dict[str, dict[str, Any]]:
    out = node.cli_json("docs", "--corpus", CORPUS, "--json", timeout=60)
    return {d["doc_cid"]: d for d in out["documents"]}


def watched(node: MeshNode) -> dict[str, Any]:
    (entry,) = node.cli_json("watch", "list", "--json", timeout=60)["folders"]
    return entry


def settled(node: MeshNode, folder: Path) -> dict[str, Any] | None:
    """The folder's entry once the watcher is idle and the corpus holds exactly the folder."""
    entry = watched(node)
    if entry["state"] != "watching" or entry["pending"] or "scan" in entry:
        return None
    want = expected(folder)
    return entry if set(docs(node)) == set(want) and entry["indexed"] == len(want) else None


def assert_mirrors(a: MeshNode, b: MeshNode, folder: Path) -> dict[str, Any]:
    """Wait until the corpus is the folder; then every document names its file, and a query about
    the note answers from the note as it is now."""
    entry = wait_for(lambda: settled(b, folder), timeout=WAIT, what="the corpus to mirror the folder")
    want = expected(folder)
    held = docs(a)
    assert set(held) == set(want)
    for cid, path in want.items():
        assert held[cid]["source_path"] == path, held[cid]
    note = folder / "notes" / "heating.txt"
    if note.exists():
        hits = query_note(a)
        assert {h["metadata"]["doc_cid"] for h in hits} == {blob_cid(note.read_bytes())}
    return entry


def query_note(node: MeshNode) -> list[dict[str, Any]]:
    result = Client(node.home).call(
        "rag.query",
        {"corpus": CORPUS},
        {"query": NOTE_QUESTION, "k": 5, "filter": {"doc_filename": "heating.txt"}},
        timeout=120,
    )
    return list(result.output["chunks"])


def events(node: MeshNode, kind: str) -> list[dict[str, Any]]:
    return [e for e in node.cli_json("events", "--json", timeout=60)["events"] if e["event_type"] == kind]


def nodes(mesh: LocalMesh) -> tuple[MeshNode, MeshNode]:
    return mesh.nodes["a"], mesh.nodes["b"]


def passes_read(b: MeshNode) -> list[int]:
    """How many files each of B's passes read (its log's ``folder_pass`` lines)."""
    assert b.log_path is not None
    lines = [json.loads(x) for x in b.log_path.read_text().splitlines() if '"folder_pass"' in x]
    return [int(x["read"]) for x in lines]


# -- the steps ------------------------------------------------------------------------------------
def test_a_member_may_not_watch(mesh: LocalMesh, folder: Path) -> None:
    proc = mesh.nodes["c"].cli("watch", "add", str(folder), "--corpus", CORPUS, check=False)
    assert proc.returncode != 0
    assert "only a member" in proc.stderr and "not trusted" in proc.stderr, proc.stderr


def test_first_scan_indexes_the_documents_only(mesh: LocalMesh, folder: Path) -> None:
    a, b = nodes(mesh)
    out = b.cli_json("watch", "add", str(folder), "--corpus", CORPUS, "--json")
    assert out == {"path": str(folder), "corpus": CORPUS, "added": True}
    entry = assert_mirrors(a, b, folder)
    again = b.cli("watch", "add", str(folder), "--corpus", CORPUS).stdout
    assert again.startswith("already watching") and "first scan" not in again
    assert len(docs(a)) == 3  # two PDFs and the note; not the hidden, lock or ignored files
    assert entry["failed"] == [] and entry["failed_count"] == 0 and entry["last_change"]
    human = b.cli("watch", "list").stdout
    assert f"{folder} -> {CORPUS}" in human and "3 indexed, 0 pending, 0 failed files" in human
    assert f"from {folder / 'notes' / 'heating.txt'}" in a.cli("docs", "--corpus", CORPUS).stdout


def test_a_new_file_is_indexed(mesh: LocalMesh, folder: Path) -> None:
    a, b = nodes(mesh)
    (folder / "notes" / "shed.md").write_text(
        "# Shed\n\nThe bicycle shed key hangs behind the kitchen door.\n"
    )
    assert_mirrors(a, b, folder)


def test_a_changed_file_replaces_its_old_version_and_queries_never_go_empty(
    mesh: LocalMesh, folder: Path
) -> None:
    a, b = nodes(mesh)
    note = folder / "notes" / "heating.txt"
    old, new = blob_cid(NOTE_OLD.encode()), blob_cid(NOTE_NEW.encode())
    seen: list[set[str]] = []
    stop = threading.Event()

    def ask() -> None:
        while not stop.is_set():
            seen.append({h["metadata"]["doc_cid"] for h in query_note(a)})

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        wait_for(lambda: len(seen) >= 2, timeout=120, what="queries before the change")
        note.write_text(NOTE_NEW)
        assert_mirrors(a, b, folder)
        count = len(seen)
        wait_for(lambda: len(seen) >= count + 2, timeout=120, what="queries after the change")
    finally:
        stop.set()
        asker.join()
    assert all(s in ({old}, {new}) for s in seen), seen  # one version, never neither, never both
    assert seen[0] == {old} and seen[-1] == {new}
    deleted = {e["data"]["doc_cid"] for e in events(a, "rag.document.deleted")}
    assert old in deleted  # the old version's deletion is signed and announced: replicas follow


def test_a_renamed_file_is_not_embedded_again(mesh: LocalMesh, folder: Path) -> None:
    a, b = nodes(mesh)
    pdf = folder / PDFS[0].name
    cid = blob_cid(pdf.read_bytes())
    before = len([e for e in events(a, "rag.document.ingested") if e["data"]["doc_cid"] == cid])
    (folder / "moved").mkdir()
    pdf.rename(folder / "moved" / "creativity.pdf")
    assert_mirrors(a, b, folder)
    after = len([e for e in events(a, "rag.document.ingested") if e["data"]["doc_cid"] == cid])
    assert after == before == 1
    assert cid not in {e["data"]["doc_cid"] for e in events(a, "rag.document.deleted")}
    # citations name the file as it is now called, and a filter on the new name finds it
    assert docs(a)[cid]["filename"] == "creativity.pdf"
    found = Client(a.home).call(
        "rag.query",
        {"corpus": CORPUS},
        {"query": "creativity", "k": 3, "filter": {"doc_filename": "creativity.pdf"}},
        timeout=120,
    )
    assert {h["metadata"]["doc_cid"] for h in found.output["chunks"]} == {cid}
    (update,) = [e for e in events(a, "rag.document.updated") if e["data"]["doc_cid"] == cid]
    assert update["data"]["filename"] == "creativity.pdf"


def test_a_deleted_file_is_deleted_from_the_corpus(mesh: LocalMesh, folder: Path) -> None:
    a, b = nodes(mesh)
    shed = folder / "notes" / "shed.md"
    cid = blob_cid(shed.read_bytes())
    deleted_at = time.time()
    shed.unlink()
    entry = assert_mirrors(a, b, folder)
    assert entry["last_change"] >= deleted_at - 1  # the deletion is the folder's last change
    assert cid in {e["data"]["doc_cid"] for e in events(a, "rag.document.deleted")}


def test_a_gone_file_whose_copy_remains_makes_its_document_name_the_copy(
    mesh: LocalMesh, folder: Path
) -> None:
    """Two files of one content are one document; when the file it names goes, it names the copy
    (its citations named a file that was no longer there)."""
    a, b = nodes(mesh)
    original = folder / PDFS[1].name
    cid = blob_cid(original.read_bytes())
    shutil.copy(original, folder / "copy-of-latex.pdf")

    def both_indexed() -> bool:
        entry = watched(b)
        return (
            entry["state"] == "watching"
            and not entry["pending"]
            and entry["indexed"] == len(walk(folder, read_ignore(folder)))
        )

    wait_for(both_indexed, timeout=WAIT, what="the copy to be indexed")
    assert docs(a)[cid]["source_path"] == str(original)  # one document, still the original's
    original.unlink()
    assert_mirrors(a, b, folder)  # its source_path is the copy's
    assert docs(a)[cid]["filename"] == "copy-of-latex.pdf"
    assert cid not in {e["data"]["doc_cid"] for e in events(a, "rag.document.deleted")}
    (folder / "copy-of-latex.pdf").rename(original)  # as it was, for the steps after
    assert_mirrors(a, b, folder)
    assert docs(a)[cid]["filename"] == PDFS[1].name


def test_a_half_written_file_is_read_once_it_holds_still(mesh: LocalMesh, folder: Path) -> None:
    a, b = nodes(mesh)
    data = HALF.read_bytes()
    target = folder / "naacl.pdf"
    state = sqlite3.connect(f"file:{b.home / 'folders.sqlite'}?mode=ro", uri=True)

    def seen_pending() -> bool:
        row = state.execute("SELECT status FROM files WHERE rel = 'naacl.pdf'").fetchone()
        return row is not None and row[0] == "pending"

    try:
        with target.open("wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            wait_for(seen_pending, timeout=60, what="the watcher to see the half-written file", interval=0.01)
            f.write(data[len(data) // 2 :])
    finally:
        state.close()
    assert_mirrors(a, b, folder)
    half = blob_cid(data[: len(data) // 2])
    assert half not in {e["data"]["doc_cid"] for e in events(a, "rag.document.ingested")}
    assert watched(b)["failed_count"] == 0


def test_after_a_restart_only_what_changed_is_read(mesh: LocalMesh, folder: Path) -> None:
    """While B is down: a file changed, one deleted, one added, and the corpus loses the document of
    a file that did not change (deleted on its host): B's first pass reads those three only."""
    a, b = nodes(mesh)
    b.stop()
    (folder / "notes" / "heating.txt").write_text(NOTE_OLD + "It was moved to the laundry room.\n")
    (folder / PDFS[1].name).unlink()
    (folder / "notes" / "garden.txt").write_text("Tomatoes are sown in March on the windowsill.\n")
    said = a.cli("delete", blob_cid((folder / "naacl.pdf").read_bytes()), "--corpus", CORPUS).stdout
    assert f"came from the watched file {folder / 'naacl.pdf'}" in said  # and it comes back, below
    reads_before = len(passes_read(b))
    b.start()
    b.wait_ready()
    entry = assert_mirrors(a, b, folder)
    reads = passes_read(b)[reads_before:]
    assert sum(reads) == 3, reads  # the changed note, the new file, the lost one; not the other two
    assert entry["files"] == 4


def test_remove_stops_watching_and_keeps_the_documents(mesh: LocalMesh, folder: Path) -> None:
    a, b = nodes(mesh)
    held = set(docs(a))
    out = b.cli_json("watch", "remove", str(folder), "--json")
    assert out["removed"] is True
    assert b.cli_json("watch", "list", "--json")["folders"] == []
    assert set(docs(a)) == held
    proc = b.cli("watch", "remove", str(folder), check=False)
    assert proc.returncode != 0 and "is not watched" in proc.stderr
