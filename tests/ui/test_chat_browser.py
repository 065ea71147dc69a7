"""The Ask page's chats in a real headless Chromium (Debian's), by what a person sees: the corpora
left out of an answer (a host offline), a document attached to one chat with the paperclip and
answered from, the chat's model picker, and a chat exported as Markdown.

One mesh for the module: ``kitchen`` (founder: embedding, RAG, the web UI, and ``llm.chat`` of
a real OpenAI-compatible server on 127.0.0.1 in this process) and ``attic`` (trusted, RAG
without an embedder of its own: it hosts the corpus ``family``, then goes offline).  Each
scenario runs alone too (``-k NAME``) and ends with assertions on the page and a screenshot.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from hearthnet.contracts.reading import MAX_READ_BYTES
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.openai_chat_server import OpenAIChatServer
from tests.shared_data import PDF_DIR
from tests.ui.harness import (
    ARTIFACTS,
    Ui,
    chromium,
    css,
    fetch,
    owner_signed_in,
    person_link,
    screenshot,
    skip_without_browser,
    text_of,
    ui_url,
    wait,
)

pytestmark = pytest.mark.slow

PAPER = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
QUESTION = "What does Unrestricted Relation Discovery discover from texts?"
MODEL = "kitchen-chat"
UI_ENV = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"}
FAMILY_NOTE = (
    "Family notes. The spare key of the garden shed hangs on the hook behind the pantry door. "
    "Grandmother's recipes are kept in the blue folder on the kitchen shelf.\n"
)


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        yield s


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, server: OpenAIChatServer) -> Iterator[LocalMesh]:
    skip_without_browser()
    m = LocalMesh(tmp_path_factory.mktemp("ui-chat"))
    m.env["HEARTHNET_OCR"] = "0"
    try:
        kitchen = m.add("kitchen", env=UI_ENV)
        with (kitchen.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[llm.openai]]\nbase_url = "{server.url}"\nmodel = "{MODEL}"\n'
                "context_tokens = 8192\nmax_output_tokens = 256\n"
            )
        attic = m.add("attic", env={"HEARTHNET_EMBEDDING": "0"})
        m.found(kitchen)
        m.invite(kitchen, attic, "trusted")  # trusted: it announces its own corpus
        m.wait_full_mesh(timeout=90)
        wait_for(
            lambda: any(x["capability"] == "embed.text@1.0" for x in attic.status()["capabilities"]),
            timeout=60,
            what="attic to see kitchen's embedder",
        )
        wait_for(
            lambda: any(x["capability"] == "llm.chat@1.0" for x in kitchen.status()["capabilities"]),
            timeout=120,
            what="kitchen to offer its llm.chat model",
        )
        note = m.root / "family-notes.txt"
        note.write_text(FAMILY_NOTE)
        attic.cli_json("ingest", str(note), "--corpus", "family", timeout=300)
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def driver(mesh: LocalMesh) -> Iterator[Any]:
    with chromium() as d:
        d.set_page_load_timeout(30)
        d.set_script_timeout(60)
        yield d


def kitchen(mesh: LocalMesh) -> MeshNode:
    return mesh.nodes["kitchen"]


@pytest.fixture(autouse=True)
def owner(mesh: LocalMesh, driver: Any) -> None:
    """The browser signed in as kitchen's owner, on a fresh Ask page with a new chat."""
    a = kitchen(mesh)
    owner_signed_in(driver, a, "/ask")
    driver.get(ui_url(a) + "/ask")
    wait(driver, lambda d: css(d, "#model[data-loaded]"), what="the Ask page's models")


def ask_on_page(driver: Any, question: str) -> Any:
    """Type ``question``, send it, and wait for its answer to finish; the answer's element."""
    before = len(css(driver, "#messages > li"))
    box = css(driver, "#question")[0]
    box.clear()
    box.send_keys(question)
    css(driver, "#ask-button")[0].click()
    wait(driver, lambda d: len(css(d, "#messages > li")) > before, what="the question on the page")
    answer = css(driver, "#messages > li")[-1]
    wait(
        driver,
        lambda d: (
            not answer.find_element("css selector", ".status").text
            and answer.find_element("css selector", ".text").text
        ),
        timeout=120,
        what="the answer to finish",
    )
    return answer


def open_chat(driver: Any, session: str) -> None:
    """Click the chat's Open button, again if the list was redrawn under the click (a refresh)."""
    from selenium.common.exceptions import StaleElementReferenceException

    def clicked(d: Any) -> bool:
        try:
            css(d, f'#session-list li[data-session="{session}"] button.open')[0].click()
        except (StaleElementReferenceException, IndexError):
            return False
        return True

    wait(driver, clicked, what=f"chat {session} to open")


def pick(driver: Any, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(css(driver, "#model")[0]).select_by_value(value)


def current_chat(driver: Any) -> str:
    return str(
        driver.execute_script("return document.querySelector('#session-list li.current')?.dataset.session")
    )


# -- scenarios -------------------------------------------------------------------------------
def test_a_host_offline_is_said_above_the_answer(mesh: LocalMesh, driver: Any) -> None:
    a, attic = kitchen(mesh), mesh.nodes["attic"]
    attic.stop()
    wait_for(lambda: attic.node_id not in a.peer_ids(), timeout=60, what="kitchen to see attic go")
    pick(driver, "extractive")
    answer = ask_on_page(driver, "Where does the spare key of the garden shed hang?")
    notice = answer.find_element("css selector", ".left-out")
    assert notice.is_displayed()
    text = notice.text
    assert text.startswith("Left out of this answer: corpus 'family' is hosted on attic (")
    assert "which is offline since " in text and " ago)" in text, text
    # above the answer: the notice comes first in the answer's box
    first = driver.execute_script("return arguments[0].querySelector('.answer').firstElementChild", answer)
    assert first.get_attribute("class") == "left-out"
    assert notice.location["y"] < answer.find_element("css selector", ".text").location["y"]
    screenshot(driver, "chat-01-left-out-notice")


def test_an_attached_pdf_answers_its_chat_and_is_gone_with_it(mesh: LocalMesh, driver: Any) -> None:
    css(driver, "#pick-attachment")[0].send_keys(str(PAPER))
    wait(
        driver,
        lambda d: PAPER.name in text_of(d, "#attachments li.attachment:not(.pending)"),
        timeout=300,
        what="the attached PDF to be listed",
    )
    listed = text_of(driver, "#attachments")
    assert "8 pages" in listed and "this chat only" in listed
    chat = current_chat(driver)
    assert chat.startswith("web.owner.")
    pick(driver, "extractive")
    answer = ask_on_page(driver, QUESTION)
    chips = answer.find_elements("css selector", ".text .chip")
    assert chips, answer.text
    chips[0].click()
    card = wait(driver, lambda d: answer.find_elements("css selector", ".citation"), what="the citation")[0]
    assert PAPER.name in card.text and "chat:attached" in card.text, card.text
    assert card.find_elements("css selector", "blockquote.passage")
    screenshot(driver, "chat-02-attached-answer")
    # the chat deleted (its Delete button, confirmed): its documents go with it
    row = css(driver, f'#session-list li[data-session="{chat}"]')[0]
    row.find_element("css selector", "button[aria-label^='Delete']").click()
    wait(driver, lambda d: css(d, "#confirm[open]"), what="the confirmation")
    css(driver, "#confirm-ok")[0].click()
    wait(driver, lambda d: not css(d, f'#session-list li[data-session="{chat}"]'), what="the chat to go")
    assert fetch(driver, "GET", f"/api/chat?session={chat}")["status"] == 404
    with sqlite3.connect(kitchen(mesh).home / "answer.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM attached_chunks").fetchone()[0] == 0
    assert not text_of(driver, "#attachments")
    # the same question in a new chat: the paper is no source of it
    pick(driver, "extractive")
    again = ask_on_page(driver, QUESTION)
    assert PAPER.name not in again.text
    for chip in again.find_elements("css selector", ".text .chip"):
        chip.click()
        assert PAPER.name not in text_of(driver, "#messages > li:last-child .citation")
    screenshot(driver, "chat-03-attachment-gone")


def test_the_model_is_picked_per_chat(mesh: LocalMesh, driver: Any, server: OpenAIChatServer) -> None:
    options = [o.get_attribute("value") for o in css(driver, "#model option")]
    assert options == ["", f"model:{MODEL}", "extractive"], options
    pick(driver, "extractive")
    asked = server_requests(server)
    quoted = ask_on_page(driver, "Where does the spare key of the garden shed hang?")
    assert "Extractive answer" in quoted.find_element("css selector", ".mode").text
    assert server_requests(server) == asked  # the model was not asked
    extractive_chat = current_chat(driver)
    css(driver, "#new-chat")[0].click()
    assert css(driver, "#model")[0].get_attribute("value") == ""
    pick(driver, f"model:{MODEL}")
    generated = ask_on_page(driver, QUESTION)
    assert not generated.find_element("css selector", ".mode").text  # no extractive label
    assert server_requests(server) > asked
    model_chat = current_chat(driver)
    # each chat reopens with its own choice
    open_chat(driver, extractive_chat)
    wait(driver, lambda d: css(d, "#model")[0].get_attribute("value") == "extractive", what="extractive")
    open_chat(driver, model_chat)
    wait(driver, lambda d: css(d, "#model")[0].get_attribute("value") == f"model:{MODEL}", what="the model")
    screenshot(driver, "chat-04-model-picked")


def server_requests(server: OpenAIChatServer) -> int:
    return len(server.requests)


def test_a_chat_is_exported_as_markdown_with_its_sources(mesh: LocalMesh, driver: Any) -> None:
    css(driver, "#pick-attachment")[0].send_keys(str(PAPER))
    wait(
        driver,
        lambda d: PAPER.name in text_of(d, "#attachments li.attachment:not(.pending)"),
        timeout=300,
        what="the attached PDF to be listed",
    )
    pick(driver, "extractive")
    ask_on_page(driver, QUESTION)
    chat = current_chat(driver)
    # the chat opened again from the node (the page reloaded): what it exports comes from the store
    driver.refresh()
    wait(driver, lambda d: css(d, "#model[data-loaded]"), what="the Ask page's models")
    wait(driver, lambda d: css(d, f'#session-list li[data-session="{chat}"] button.open'), what="the chat")
    open_chat(driver, chat)
    wait(driver, lambda d: css(d, "#messages .chip"), what="the chat's answer with its chips")
    # what the browser would save: the Blob handed to the download link
    driver.execute_script(
        "window.__md = null; URL.createObjectURL = (b) => { window.__md = b; return 'blob:captured'; };"
    )
    button = css(driver, "#export-chat")[0]
    assert button.is_displayed()
    button.click()
    markdown = driver.execute_async_script(
        "const done = arguments[0]; const b = window.__md; b ? b.text().then(done) : done(null);"
    )
    assert markdown, "no export"
    lines = markdown.splitlines()
    assert lines[0] == f"# {QUESTION}"  # made by its attachment, the chat is named by its first question
    assert f"## 1. {QUESTION}" in lines
    assert f"Documents attached to this chat: {PAPER.name}." in lines
    assert "*Extractive answer: quoted from the documents, no language model.*" in lines
    answer = markdown.split(f"## 1. {QUESTION}", 1)[1].split("Sources:")[0]
    assert "[1]" in answer and not re.search(r"\[[^\]]*#[^\]]*\]", answer), answer  # numbers, no ids
    sources = markdown.split("Sources:\n\n", 1)[1].splitlines()
    assert sources[0].startswith("1. ")
    assert f"{PAPER.name}, page " in sources[0] and "— chat:attached on kitchen" in sources[0], sources
    assert sources[1].startswith("   > ")  # the passage quoted
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "chat-export.md").write_text(markdown)
    screenshot(driver, "chat-05-export")


def test_a_persons_attachment_is_bounded_and_their_own(mesh: LocalMesh, driver: Any) -> None:
    """Over HTTP as a member: a document attached makes the person's own chat; another login's chat
    is as if it did not exist; an empty or oversized body is refused before anything is read."""
    a = kitchen(mesh)
    guest = Ui(person_link(a, f"guest-{os.getpid()}", "member"))
    try:
        made = guest.post(
            "/api/chats/attach?name=notes.md", content=b"# Notes\n\nThe shed key hangs by the door.\n"
        )
        assert made.status_code == 200, made.text
        chat = made.json()["session"]
        assert chat.startswith("web.tok_") and made.json()["attachment"]["chunks"] == 1
        listed = guest.get(f"/api/chat?session={chat}").json()
        assert [x["name"] for x in listed["attachments"]] == ["notes.md"]
        owners = fetch(driver, "GET", "/api/chats")  # the owner's chats, from the page
        theirs = [c["id"] for c in json.loads(owners["body"])["sessions"] if c["id"].startswith("web.owner.")]
        if theirs:
            refused = guest.post(f"/api/chats/attach?name=x.md&session={theirs[0]}", content=b"# x\n\nhello")
            assert refused.status_code == 404
        empty = guest.post(f"/api/chats/attach?name=e.txt&session={chat}", content=b"")
        assert empty.status_code == 400 and "empty" in empty.json()["message"]
        big = guest.post(
            f"/api/chats/attach?name=big.txt&session={chat}", content=b"w " * (MAX_READ_BYTES // 2 + 1)
        )
        assert big.status_code == 413 and "8,388,608" in big.json()["message"]
        assert [x["name"] for x in guest.get(f"/api/chat?session={chat}").json()["attachments"]] == [
            "notes.md"
        ]
    finally:
        guest.close()
