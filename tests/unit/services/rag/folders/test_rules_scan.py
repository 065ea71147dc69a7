"""Which files a watched folder holds (hidden, temporary, ignored, unknown formats left out), what
changed since the watcher's state, and a hash that refuses a file being written."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from hearthnet.blobs.cid import blob_cid
from hearthnet.services.rag.folders.rules import Ignore, parse_ignore, read_ignore
from hearthnet.services.rag.folders.scan import hash_file, plan, walk
from hearthnet.services.rag.folders.state import FAILED, INDEXED, PENDING, FileRow, FolderState, Stat


def test_hidden_temporary_and_unknown_files_are_not_documents() -> None:
    rules = Ignore()
    for name in ("a.pdf", "notes/b.md", "c.TXT", "deep/er/d.markdown"):
        assert rules.watched(PurePosixPath(name)), name
    for name in (
        ".hidden.txt",
        ".git/x.md",
        "a/.cache/y.pdf",
        "~$report.docx.txt",
        ".~lock.notes.txt#",
        "download.pdf.part",
        "big.pdf.crdownload",
        "draft.txt~",
        ".#draft.md",
        "photo.xyz",
        "noext",
    ):
        assert not rules.watched(PurePosixPath(name)), name


def test_hearthnetignore_patterns(tmp_path: Path) -> None:
    (tmp_path / ".hearthnetignore").write_text("# private things\n\n*.secret.txt\ntax/\nold/2019/*\n")
    rules = read_ignore(tmp_path)
    assert rules.patterns == ("*.secret.txt", "tax/", "old/2019/*")
    assert rules.ignored(PurePosixPath("a.secret.txt"))
    assert rules.ignored(PurePosixPath("x/a.secret.txt"))
    assert rules.ignored(PurePosixPath("tax/2024.pdf")) and rules.ignored(PurePosixPath("a/tax/b.pdf"))
    assert not rules.ignored(PurePosixPath("tax.pdf"))  # "tax/" names folders only
    assert rules.ignored(PurePosixPath("old/2019/x.pdf")) and not rules.ignored(
        PurePosixPath("old/2020/x.pdf")
    )
    assert parse_ignore(["  ", "#c", "a"]).patterns == ("a",)
    assert read_ignore(tmp_path / "none").patterns == ()


def test_walk_finds_the_documents_with_their_stat(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("alpha")
    (tmp_path / "b.md").write_text("# b")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.txt").write_text("c")
    (tmp_path / "~$d.txt").write_text("lock")
    (tmp_path / "loop").symlink_to(tmp_path)  # a link back up is not followed
    found = walk(tmp_path, Ignore())
    assert sorted(found) == ["b.md", "sub/a.txt"]
    st = os.stat(tmp_path / "sub" / "a.txt")
    assert found["sub/a.txt"] == Stat(st.st_size, st.st_mtime_ns)


def test_plan_reads_only_what_changed() -> None:
    s1, s2 = Stat(10, 1), Stat(11, 2)
    known = {
        "same.txt": FileRow("same.txt", s1, "blake3:1", INDEXED, None, 0.0),
        "touched.txt": FileRow("touched.txt", s1, "blake3:2", INDEXED, None, 0.0),
        "broken.pdf": FileRow("broken.pdf", s1, None, FAILED, "broken", 0.0),
        "waiting.txt": FileRow("waiting.txt", s1, None, PENDING, None, 0.0),
        "gone.txt": FileRow("gone.txt", s1, "blake3:3", INDEXED, None, 0.0),
    }
    disk = {"same.txt": s1, "touched.txt": s2, "broken.pdf": s1, "waiting.txt": s1, "new.txt": s1}
    p = plan(disk, known)
    assert sorted(p.unchanged) == ["broken.pdf", "same.txt"]
    assert sorted(p.todo) == ["new.txt", "touched.txt", "waiting.txt"]
    assert sorted(p.gone) == ["gone.txt"]


def test_hash_is_the_doc_cid_and_refuses_a_file_written_meanwhile(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"hello world")
    got = hash_file(f)
    assert got is not None and got[0] == blob_cid(b"hello world") and got[1].size == 11
    assert hash_file(tmp_path / "missing.txt") is None


def test_state_keeps_folders_and_files(tmp_path: Path) -> None:
    state = FolderState(tmp_path / "folders.sqlite")
    state.add_folder("/x", "c", from_config=False)
    state.put("/x", [FileRow("a.txt", Stat(1, 2), "blake3:a", INDEXED, None, 5.0)])
    state.close()
    again = FolderState(tmp_path / "folders.sqlite")
    assert [(f.path, f.corpus) for f in again.folders()] == [("/x", "c")]
    assert again.files("/x")["a.txt"].doc_cid == "blake3:a"
    again.drop("/x", ["a.txt"])
    assert again.files("/x") == {}
    again.remove_folder("/x")
    assert again.folders() == []
    again.close()
