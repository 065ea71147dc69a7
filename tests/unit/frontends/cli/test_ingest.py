"""``hearthnet ingest``'s own checks and folder walk, before any node is asked."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

import pytest

from hearthnet.frontends.cli import main
from hearthnet.frontends.cli.ingest import _expand, _print_entry, _summary
from hearthnet.frontends.cli.output import path_text, shown


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--corpus", "Bad_Name"], "invalid"),
        (["--corpus", "system"], "read-only"),
        (["--corpus", "c", "--title", "One title"], "--title names one document, but 2 files"),
        (["--corpus", "c", "--title", " "], "--title is empty"),
        (["--corpus", "c", "--language", "e\x9bn"], "--language"),
    ],
)
def test_arguments_that_cannot_work_fail_in_one_line_before_any_node_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], why: str
) -> None:
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text("# A\n\nSome text.\n")
    home = tmp_path / "no-node-here"  # nothing runs there: the check comes first
    code = main(["ingest", str(tmp_path / "a.md"), str(tmp_path / "b.md"), "--home", str(home), *extra])
    err = capsys.readouterr().err
    assert code == 1 and why in err and len(err.strip().splitlines()) == 1


def test_a_folder_gives_its_visible_documents_once_each(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / ".git").mkdir()
    for rel in ("a.pdf", "sub/b.md", "sub/c.TXT", "._a.pdf", ".git/x.md", "sub/.hidden.md", "notes.doc"):
        (docs / rel).write_bytes(b"x")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "d.md").write_bytes(b"x")
    os.symlink(tmp_path / "elsewhere", docs / "linked")  # followed
    os.symlink(docs, docs / "sub" / "loop")  # a loop: walked once
    files, problems = _expand([str(docs), str(docs / "a.pdf"), str(docs / "._a.pdf")])
    names = [f.relative_to(docs).as_posix() for f in files]
    assert names == ["a.pdf", "linked/d.md", "sub/b.md", "sub/c.TXT", "._a.pdf"]  # named directly: taken
    assert problems == []


def test_a_symlink_loop_named_directly_is_one_failed_file(tmp_path: Path) -> None:
    loop = tmp_path / "loop.md"
    os.symlink(loop, loop)
    good = tmp_path / "good.md"
    good.write_text("text")
    files, problems = _expand([str(loop), str(good)])
    assert files == [good]
    assert [(p["path"], p["ok"], p["error"]) for p in problems] == [(str(loop), False, "bad_request")]


def test_text_shown_on_a_terminal_cannot_steer_it() -> None:
    assert shown("Gärten 庭 p.3") == "Gärten 庭 p.3"
    assert shown("a\x9b31mb\u202ec\x7f") == "a\\u009b31mb\\u202ec\\u007f"
    assert path_text(Path(os.fsdecode(b"caf\xe9.md"))) == "caf\ufffd.md"


@pytest.mark.parametrize("k", ["0", "21", str(10**30)])
def test_a_k_outside_1_to_20_is_one_line_before_any_node_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], k: str
) -> None:
    code = main(["query", "roses", "--corpus", "c", "-k", k, "--home", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == 1 and "-k must be between 1 and 20" in err and len(err.strip().splitlines()) == 1


def test_a_folder_says_what_it_skipped_and_why(tmp_path: Path) -> None:
    """Hardening row 20: MANIFEST.tsv was skipped silently; README.md stays a document (it is .md)."""
    docs = tmp_path / "family"
    (docs / ".git").mkdir(parents=True)
    for name in ("README.md", "letters.md", "MANIFEST.json", ".DS_Store", "scan", ".git/config"):
        (docs / name).write_text("x")
    skipped: list[dict[str, str]] = []
    files, problems = _expand([str(docs)], skipped)
    assert [f.name for f in files] == ["README.md", "letters.md"] and problems == []
    reasons = {Path(s["path"]).name: s["reason"] for s in skipped}
    assert set(reasons) == {".git", "MANIFEST.json", ".DS_Store", "scan"}  # .git's files are not listed
    assert "unsupported type .json" in reasons["MANIFEST.json"] and "hidden" in reasons[".DS_Store"]
    assert "hidden folder" in reasons[".git"] and "no file extension" in reasons["scan"]
    results = [
        {"path": str(docs / "README.md"), "ok": True, "existing": False, "chunks_indexed": 1},
        {"path": str(docs / "letters.md"), "ok": False, "error": "bad_request", "message": "empty"},
    ]
    line = _summary(results, skipped[:1], "family", "n1")
    assert line.startswith("ingested 1 of 3 files into family on n1 (1 chunk), 1 failed, 1 skipped: ")
    assert skipped[0]["reason"] in line
    hidden = next(s for s in skipped if Path(s["path"]).name == ".DS_Store")
    flat = _summary(results[:1], [hidden], "family", "n1")
    assert flat.endswith("1 skipped: .DS_Store (hidden: its name starts with '.')"), flat  # no (( ))
    assert all("(" not in s["reason"] for s in skipped)
    assert _summary(results[:1], [], "family", "n1") == "ingested 1 file into family on n1 (1 chunk)"
    two = [results[0], {**results[0], "path": str(docs / "letters.md")}]
    assert _summary(two, [], "family", "n1").startswith("ingested all 2 files into family on n1 ")


def test_a_corpus_name_is_checked_with_a_hint_and_an_empty_stdin_query_refused_before_any_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = str(tmp_path / "none")
    for name, why in [("Family", "did you mean 'family'?"), ("fam/ily", "invalid"), ("a" * 65, "at most 64")]:
        assert main(["query", "roses", "--corpus", name, "--home", home]) == 1
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.setattr("sys.stdin", io.StringIO("  \n"))
    assert main(["query", "-", "--corpus", "family", "--home", home]) == 1
    err = capsys.readouterr().err
    assert "query read from stdin is empty" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9 au lait")))
    assert main(["query", "-", "--corpus", "family", "--home", home]) == 1
    err = capsys.readouterr().err
    assert err == "hearthnet: bad_request: the query read from stdin is not valid UTF-8 text (byte 4)\n"
    for text in ("x" * (64 * 1024 + 1), "é" * (64 * 1024 + 1), "€" * (80 * 1024)):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        assert main(["query", "-", "--corpus", "family", "--home", home]) == 1
        err = capsys.readouterr().err
        assert err == "hearthnet: bad_request: the query on stdin is longer than 65536 characters\n", err


def test_a_file_whose_pages_ocr_read_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(json=False)
    entry = {"path": "/scans/huck.pdf", "ok": True, "existing": False, "chunks_indexed": 3}
    _print_entry(args, {**entry, "ocr_pages": [1]})
    _print_entry(args, {**entry, "ocr_pages": [2, 5]})
    _print_entry(args, {**entry, "ocr_pages": []})
    assert capsys.readouterr().out.splitlines() == [
        "ok    huck.pdf: 3 chunks, 1 page read by OCR",
        "ok    huck.pdf: 3 chunks, 2 pages read by OCR",
        "ok    huck.pdf: 3 chunks",
    ]


def test_small_files_go_in_batches_and_large_ones_alone(tmp_path: Path) -> None:
    from hearthnet.frontends.cli.ingest import BATCH_FILE_BYTES, BATCH_FILES, _groups

    small = []
    for i in range(BATCH_FILES + 2):
        (tmp_path / f"s{i:03}.txt").write_text("small", encoding="utf-8")
        small.append(tmp_path / f"s{i:03}.txt")
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (BATCH_FILE_BYTES + 1))
    files = [*small[:2], big, *small[2:]]
    groups = _groups(files, single=False)
    assert [len(g) for g in groups] == [2, 1, BATCH_FILES]
    assert [p for g in groups for p in g] == files  # the order of the files is kept
    assert _groups(small[:3], single=True) == [[p] for p in small[:3]]  # --title: one file each
