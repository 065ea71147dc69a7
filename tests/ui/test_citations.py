"""Invented citations never reach a reader (issues 29.4 and 34.1), through every door of a real node.

One node: MiniLM, RAG with the heating handbook in corpus ``heating``, ``llm.chat`` backed by
the loopback OpenAI-compatible server (``tests/openai_chat_server.py``), which obeys a document
that says "see [secret-plans.pdf#p4]": mid-answer it cites chunks that were never retrieved, in
markers of every shape, streamed in 3-character pieces so each marker is split across deltas.
No door's stream (the CLI, the Ask page's ``/api/ask``, the gateway's deltas read by the official
``openai`` client, MCP) carries one, the streamed text is the unstreamed answer, and the Ask page
in Chromium shows chips for the retrieved chunk only.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.openai_chat_server import BOGUS_MARKERS, OpenAIChatServer
from tests.ui.harness import Ui, chromium, owner_link, person_link, skip_without_browser, token_of, ui_url

ROOT = Path(__file__).resolve().parents[2]
HEATING = ROOT / "hearthnet" / "demo" / "heating_handbook.pdf"
MODEL = "test-chat"
UI_ENV = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"}
BOILER = "When is the gas boiler serviced, and by whom?"
MARKER = re.compile(r"\[([^\[\]]*#[^\[\]]*)\]")
"""Any closed bracket holding a "#" (what the Ask page used to turn into a chip)."""
BOGUS_PARTS = ("secret-plans", "[a#b]", "§1", "deadbeefcafe0000")


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        s.hostile, s.piece_chars = True, 3
        yield s


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, server: OpenAIChatServer) -> Iterator[MeshNode]:
    root = tmp_path_factory.mktemp("citations")
    m = LocalMesh(root)
    try:
        a = m.add("a", env=UI_ENV)
        with (a.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[llm.openai]]\nbase_url = "{server.url}"\nmodel = "{MODEL}"\n'
                "context_tokens = 4096\nmax_output_tokens = 256\n"
            )
        m.found(a)
        a.cli_json("ingest", str(HEATING), "--corpus", "heating", timeout=300)
        wait_for(lambda: (a.home / "ui.json").exists(), timeout=30, what="the UI to start")
        yield a
    finally:
        m.close()


@pytest.fixture(scope="module")
def member_key(node: MeshNode) -> str:
    return token_of(person_link(node, "agent", "member"))


def bogus_in(text: str, allowed: set[str]) -> list[str]:
    """What in ``text`` poses as a citation of anything but the ``allowed`` chunks."""
    found = [m.group() for m in MARKER.finditer(text) if m.group(1).rsplit("#", 1)[1] not in allowed]
    return found + [p for p in BOGUS_PARTS if p in text]


def test_the_gateways_streamed_deltas_are_the_checked_answer(node: MeshNode, member_key: str) -> None:
    gateway = openai.OpenAI(base_url=ui_url(node) + "/v1", api_key=member_key, max_retries=0, timeout=120)
    question: Any = [{"role": "user", "content": BOILER}]
    corpora = {"corpora": ["heating"]}
    stream = gateway.chat.completions.create(model=MODEL, messages=question, stream=True, extra_body=corpora)
    chunks = list(stream)
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    last = (chunks[-1].model_extra or {})["hearthnet"]
    cited = {c["chunk_id"] for c in last["citations"]}
    assert len(cited) == 1 and "answer" not in last  # no corrected copy in a field of its own
    assert len([d for d in deltas if d]) > 10  # the model's small pieces, passed on as they come
    for d in deltas:
        assert bogus_in(d, cited) == []
    whole = gateway.chat.completions.create(model=MODEL, messages=question, extra_body=corpora)
    content = whole.choices[0].message.content or ""
    assert "".join(deltas) == content and bogus_in(content, cited) == []  # the very text unstreamed
    assert content.count("[heating_handbook.pdf#") == 2


def test_the_ask_pages_event_stream_never_carries_a_bogus_marker(node: MeshNode) -> None:
    owner = Ui(owner_link(node))
    try:
        events = []
        with owner.http.stream(
            "POST", "/api/ask", json={"question": BOILER}, headers={"X-CSRF-Token": owner.csrf}, timeout=120
        ) as response:
            assert response.status_code == 200, response.read()
            kind = None
            for line in response.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind is not None:
                    events.append((kind, json.loads(line[6:])))
    finally:
        owner.close()
    done = events[-1][1]
    assert events[-1][0] == "done", events[-1]
    cited = {c["chunk_id"] for c in done["citations"]}
    streamed = "".join(d["delta"] for k, d in events if k == "frame" and "delta" in d)
    assert streamed == done["answer"] and cited and bogus_in(streamed, cited) == []
    assert done["meta"]["citations_removed"] == len(BOGUS_MARKERS)


@asynccontextmanager
async def mcp_over_http(node: MeshNode, key: str) -> AsyncIterator[Any]:
    import httpx as httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http,
        streamable_http_client(ui_url(node) + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcps_answer_cites_only_retrieved_chunks(node: MeshNode, member_key: str) -> None:
    async with mcp_over_http(node, member_key) as session:
        result = await session.call_tool("ask", {"question": BOILER, "corpora": ["heating"]})
    assert not result.is_error
    doc = result.structured_content or {}
    cited = {c["chunk_id"] for c in doc["citations"]}
    text = result.content[0].text  # type: ignore[union-attr]
    answer = text.split("\n\nSources:")[0]
    assert cited and bogus_in(answer, cited) == [] and bogus_in(doc["answer"], cited) == []


def test_the_cli_streams_numbered_markers_and_json_keeps_the_ids(node: MeshNode) -> None:
    shown = node.cli("ask", BOILER, "--corpus", "heating", "--no-cache", timeout=180)
    answer, _, sources = shown.stdout.partition("\nSources:\n")
    assert bogus_in(answer, set()) == [] and "#" not in answer
    assert answer.count(" [1]") == 2 and "[2]" not in answer  # the one cited page, cited twice
    assert sources.startswith(
        "[1] Heating and Hot Water Handbook — heating_handbook.pdf, page 1 — heating on "
    )
    assert "(cited" in sources.splitlines()[0]
    out = node.cli_json("ask", BOILER, "--corpus", "heating", "--no-cache", timeout=180)
    (cited,) = out["citations"]
    assert out["answer"].count(f"[heating_handbook.pdf#{cited['chunk_id']}]") == 2
    assert bogus_in(out["answer"], {cited["chunk_id"]}) == []


def test_the_ask_page_shows_chips_only_for_the_servers_citations(node: MeshNode) -> None:
    skip_without_browser()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def ask(driver: Any, question: str) -> None:
        box = driver.find_element(By.CSS_SELECTOR, "#question")
        box.clear()
        box.send_keys(question)
        box.send_keys(Keys.ENTER)

    def settled(driver: Any, n: int) -> bool:
        answers = driver.find_elements(By.CSS_SELECTOR, "#messages > li")
        return len(answers) >= n and not answers[n - 1].find_element(By.CSS_SELECTOR, ".status").text

    with chromium() as driver:
        driver.set_page_load_timeout(30)
        driver.get(owner_link(node))
        WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith("/ask"))
        ask(driver, BOILER)
        WebDriverWait(driver, 120, 0.1).until(lambda d: settled(d, 1))
        turn = driver.find_elements(By.CSS_SELECTOR, "#messages > li")[0]
        chips = turn.find_elements(By.CSS_SELECTOR, ".chip")
        text = turn.find_element(By.CSS_SELECTOR, ".text").text
        assert [c.text for c in chips] == ["1", "1"], text  # the retrieved chunk, cited twice
        assert len({c.get_attribute("data-chunk") for c in chips}) == 1
        assert bogus_in(text, set()) == [] and "#" not in text
        # a question the documents do not answer (a new chat: no turn to lean on): said so, the
        # nearest passages offered as such
        driver.find_element(By.CSS_SELECTOR, "#new-chat").click()
        ask(driver, "What is the capital of France?")
        WebDriverWait(driver, 120, 0.1).until(lambda d: settled(d, 1))
        second = driver.find_elements(By.CSS_SELECTOR, "#messages > li")[0]
        assert "The documents do not say" in second.find_element(By.CSS_SELECTOR, ".text").text
        assert "Not in the documents" in second.find_element(By.CSS_SELECTOR, ".mode").text
        assert "Nearest passages (not an answer)" in second.text
        assert not second.find_elements(By.CSS_SELECTOR, ".chip")
        # reopened from its chat, the turn's chips come from the stored citation list alone
        driver.refresh()
        WebDriverWait(driver, 30).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#session-list button.open")
        )
        driver.find_elements(By.CSS_SELECTOR, "#session-list button.open")[-1].click()
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#messages .chip"))
        reopened = driver.find_elements(By.CSS_SELECTOR, "#messages .chip")
        assert [c.text for c in reopened] == ["1", "1"]
    assert sys.platform.startswith("linux")
