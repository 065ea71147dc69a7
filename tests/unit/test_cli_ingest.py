"""``hearthnet ingest``'s own checks and folder walk, before any node is asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hearthnet.cli import main
from hearthnet.cli_data import _expand, path_text, shown


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
    for rel in ("a.pdf", "sub/b.md", "sub/c.TXT", "._a.pdf", ".git/x.md", "sub/.hidden.md", "notes.docx"):
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
