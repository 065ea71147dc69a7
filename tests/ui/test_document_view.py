"""A cited passage of a document the browser cannot open itself, in a real headless Chromium:
the citation card says where it is (section and paragraph; sheet and row), and its link opens the
document's HTML rendering (``/files/<cid>/view``) at that place, the place highlighted.

One node (founder, embedding, RAG, UI); the Word file and the workbook are made by python-docx
and openpyxl from the shared Walden text (:mod:`tests.format_documents`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode
from tests.format_documents import make, question
from tests.ui.harness import chromium, css, owner_link, screenshot, skip_without_browser, ui_url, wait

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kitchen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshNode]:
    skip_without_browser()
    m = LocalMesh(tmp_path_factory.mktemp("ui-view"))
    m.env["HEARTHNET_OCR"] = "0"
    try:
        node = m.add("kitchen", env={"HEARTHNET_UI_LISTEN": "127.0.0.1:0"})
        m.found(node)
        yield node
    finally:
        m.close()


@pytest.fixture(scope="module")
def driver(kitchen: MeshNode) -> Iterator[Any]:
    with chromium() as d:
        d.set_page_load_timeout(30)
        d.set_script_timeout(30)
        d.get(owner_link(kitchen))
        wait(d, lambda x: x.current_url.endswith("/ask"), what="the sign-in to land on Ask")
        yield d


def target(driver: Any) -> dict[str, str] | None:
    found: dict[str, str] | None = driver.execute_script(
        "const t = document.querySelector(':target');"
        "return t ? {id: t.id, text: t.textContent, bg: getComputedStyle(t).backgroundColor} : null;"
    )
    return found


def test_a_cited_word_paragraph_opens_at_its_place(kitchen: MeshNode, driver: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    made = make("docx", tmp_path)
    kitchen.cli_json("ingest", str(made.path), "--corpus", "walden", timeout=300)
    driver.get(ui_url(kitchen) + "/ask")
    wait(
        driver,
        lambda d: (
            "walden" in d.execute_script("return document.getElementById('corpora-options').textContent")
        ),
        what="the corpus to search",
    )
    box = css(driver, "#question")[0]
    box.send_keys(question())
    box.send_keys(Keys.ENTER)
    wait(driver, lambda d: css(d, "#messages .chip"), timeout=120, what="an answer with a citation chip")
    css(driver, "#messages .chip")[0].click()
    wait(driver, lambda d: css(d, ".citation .passage"), what="the citation's passage")
    card = "\n".join(e.text for e in css(driver, ".citation"))
    assert made.place in card and made.path.name in card, card
    link = css(driver, ".citation a.open-source")[0]
    assert link.get_attribute("href").endswith("/view?corpus=walden#u2-2"), link.get_attribute("href")
    assert link.text == f"Open the document at {made.place}"
    ask_window = driver.current_window_handle
    link.click()
    wait(driver, lambda d: len(d.window_handles) == 2, what="the document to open in a new tab")
    driver.switch_to.window(next(h for h in driver.window_handles if h != ask_window))
    try:
        found = wait(driver, target, what="the cited paragraph to be the page's target")
        assert found["id"] == "u2-2" and made.phrase in found["text"], found
        assert found["bg"] not in ("rgba(0, 0, 0, 0)", "transparent")  # highlighted
        headings = [e.text for e in css(driver, "section h2")]
        assert headings == ["Walden > Clothing", "Walden > Shelter", "Walden > Furniture"], headings
        screenshot(driver, "20-document-view-docx")
    finally:
        driver.close()
        driver.switch_to.window(ask_window)


def test_a_sheet_row_opens_at_its_row(kitchen: MeshNode, driver: Any, tmp_path: Path) -> None:
    made = make("xlsx", tmp_path)
    result = kitchen.cli_json("ingest", str(made.path), "--corpus", "sheets", timeout=300)
    doc_cid = result["results"][0]["doc_cid"]
    row = made.metadata["row"]
    driver.get(f"{ui_url(kitchen)}/files/{doc_cid}/view?corpus=sheets#u2-{row}")
    found = wait(driver, target, what="the cited row to be the page's target")
    assert found["id"] == f"u2-{row}" and made.phrase in found["text"], found
    assert found["text"].startswith(f"Part: part {row - 1}; Passage: ")  # the row with its column names
    assert [e.text for e in css(driver, "section h2")] == ["sheet Cover", "sheet Passages"]
    screenshot(driver, "21-document-view-xlsx")
    missing = driver.get(f"{ui_url(kitchen)}/files/{doc_cid}/view?corpus=walden")
    assert missing is None and "holds no document" in driver.page_source


def test_a_folder_picked_in_the_library_uploads_the_formats_of_the_registry(
    kitchen: MeshNode, driver: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "family"
    folder.mkdir()
    odt, pptx = make("odt", folder), make("pptx", folder)
    (folder / "notes.xyz").write_text("not a format HearthNet reads")
    (folder / ".hidden.md").write_text("# hidden\n\nnot uploaded\n")
    driver.get(ui_url(kitchen) + "/library")
    wait(driver, lambda d: css(d, "#pick-folder"), what="the upload controls")
    hint = css(driver, "#drop-hint")[0].text
    assert "Word" in hint and "EPUB" in hint and "HEIC" in hint, hint  # the registry's formats
    corpus = css(driver, "#upload-corpus")[0]
    corpus.clear()
    corpus.send_keys("family")
    css(driver, "#pick-folder")[0].send_keys(str(folder))

    def items(d: Any) -> dict[str, str]:
        found: dict[str, str] = d.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('#uploads li')].map(li =>"
            " [li.querySelector('.name').textContent, li.className]))"
        )
        return found

    wait(
        driver,
        lambda d: sum("done" in c for c in items(d).values()) == 2,
        timeout=300,
        what="both documents' uploads to finish",
    )
    names = {n.rsplit("/", 1)[-1] for n in items(driver)}
    assert names == {odt.path.name, pptx.path.name}, names  # not notes.xyz, not the hidden file
