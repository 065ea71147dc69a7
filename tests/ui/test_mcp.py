"""The MCP server driven by the official ``mcp`` client: streamable HTTP at ``/mcp`` with an API key,
and stdio through ``hearthnet mcp`` as the owner.  Also the gateway's ``rag_config``.

One node ``a``: MiniLM, the heating handbook in ``heating``, a note in the owner's ``personal``,
``llm.chat`` backed by ``tests/openai_chat_server.py``, and ``[rag] archive_urls`` naming a real
``chroma run`` server that holds the seeds' kind of archive (``tests/chroma_fixture.py``: a
research paper and a manual, MiniLM vectors).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import openai
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from hearthnet.client import Client, plain_output
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.chroma_fixture import ENGLISH, BuiltArchive, ChromaServer, build_archive, minilm_embedder
from tests.openai_chat_server import OpenAIChatServer
from tests.ui.harness import person_link, token_of, ui_url
from tests.unit.services.rag.archives.test_search_tool import seed_format_results

ROOT = Path(__file__).resolve().parents[2]
HEATING = ROOT / "hearthnet" / "demo" / "heating_handbook.pdf"
MODEL = "test-chat"
MINILM = "all-MiniLM-L6-v2"
TOOLS = {"search_archives", "rag_query", "list_corpora", "ask"}
ARCHIVE = "Forschungsarchiv"
QUERY = "How do chatbots take part in chat rooms?"


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIChatServer]:
    with OpenAIChatServer((MODEL,)) as s:
        s.cite_each_file = True
        yield s


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChromaServer, BuiltArchive]]:
    with ChromaServer(tmp_path_factory.mktemp("chroma-mcp")) as chroma_server:
        built = build_archive(
            chroma_server.client(), pdfs=ENGLISH, embed=minilm_embedder(), embedding_model=MINILM
        )
        yield chroma_server, built


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
    server: OpenAIChatServer,
    chroma: tuple[ChromaServer, BuiltArchive],
) -> Iterator[MeshNode]:
    root = tmp_path_factory.mktemp("mcp")
    m = LocalMesh(root)
    try:
        a = m.add("a", env={"HEARTHNET_UI_LISTEN": "127.0.0.1:0"})
        config = a.home / "config.toml"
        text = config.read_text()
        rag = f'archive_urls = ["{chroma[0].url}"]\n'
        text = text.replace("[rag]\n", "[rag]\n" + rag) if "[rag]\n" in text else text + "\n[rag]\n" + rag
        text += (
            f'\n[[llm.openai]]\nbase_url = "{server.url}"\nmodel = "{MODEL}"\n'
            "context_tokens = 4096\nmax_output_tokens = 256\n"
        )
        config.write_text(text)
        m.found(a)
        a.cli_json("ingest", str(HEATING), "--corpus", "heating", timeout=300)
        note = root / "diary.txt"
        note.write_text("My private diary: the spare key is under the blue flower pot.\n")
        a.cli_json("ingest", str(note), "--corpus", "personal", timeout=300)
        wait_for(lambda: (a.home / "ui.json").exists(), timeout=30, what="the UI to start")
        yield a
    finally:
        m.close()


@pytest.fixture(scope="module")
def member_key(node: MeshNode) -> str:
    return token_of(person_link(node, "agent", "member"))


def rag_config(chroma: tuple[ChromaServer, BuiltArchive]) -> dict[str, Any]:
    return {
        "archives": [
            {
                "name": ARCHIVE,
                "collection_name": chroma[1].collection_name,
                "chromadb_url": chroma[0].url,
                "embedding_model": MINILM,
            }
        ]
    }


@asynccontextmanager
async def over_http(node: MeshNode, key: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http,
        streamable_http_client(ui_url(node) + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(node: MeshNode) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hearthnet.frontends.cli", "--home", str(node.home), "mcp"],
        env={**node.env, **node.extra_env},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    return result.content[0].text


def seed_search(node: MeshNode, chroma: tuple[ChromaServer, BuiltArchive], query: str, top_k: int) -> str:
    """What seed 000's ``search_archives`` answers for this archive: its own code on the chromadb
    client, querying the chunk layer (``RAG_DEFAULT_LAYER``, the seed's recommended filter) with
    the query embedded by the node's MiniLM (what the archive's ``embedding_model`` names)."""
    with Client(node.home) as c:
        vector = plain_output(c.call("embed.text", params={"model": MINILM}, input={"texts": [query]}).output)
    collection = chroma[0].client().get_collection(name=chroma[1].collection_name)
    results = collection.query(
        query_embeddings=[vector["embeddings"][0]],
        n_results=top_k,
        where={"layer": "chunk"},
        include=["documents", "metadatas", "distances"],
    )
    all_results = [
        {"archive": ARCHIVE, "text": doc, "metadata": metadata, "distance": distance}
        for doc, metadata, distance in zip(
            results["documents"][0], results["metadatas"][0], results["distances"][0], strict=True
        )
    ]
    return seed_format_results(all_results, top_k)


async def check_tools(session: ClientSession) -> None:
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    schema = listed["search_archives"].input_schema
    assert schema["required"] == ["query"] and schema["properties"]["top_k"]["maximum"] == 20
    assert listed["rag_query"].input_schema["properties"]["k"]["type"] == "integer"
    assert listed["ask"].annotations is not None and listed["ask"].annotations.read_only_hint


# -- streamable HTTP ------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_over_http_a_key_lists_the_tools_and_calls_each(
    node: MeshNode, member_key: str, chroma: tuple[ChromaServer, BuiltArchive]
) -> None:
    async with over_http(node, member_key) as session:
        await check_tools(session)
        listing = await session.call_tool("list_corpora", {})
        names = {c["name"] for c in json.loads(text_of(listing))["corpora"]}
        assert "heating" in names and "personal" not in names  # the owner's alone
        found = await session.call_tool("rag_query", {"corpus": "heating", "query": "boiler service", "k": 3})
        assert not found.is_error
        results = (found.structured_content or {})["results"]
        assert len(results) == 3 and all(r["corpus"] == "heating" and r["text"] for r in results)
        assert results[0]["metadata"]["doc_title"]
        asked = await session.call_tool(
            "ask", {"question": "When is the boiler serviced?", "corpora": ["heating"]}
        )
        answer = asked.structured_content or {}
        assert answer["mode"] == "generated" and answer["citations"][0]["corpus"] == "heating"
        assert "\n\nSources:\n[1] heating_handbook.pdf#" in text_of(asked)
        searched = await session.call_tool(
            "search_archives", {"query": QUERY, "top_k": 4, "rag_config": rag_config(chroma)}
        )
        assert not searched.is_error
        assert text_of(searched) == await anyio.to_thread.run_sync(seed_search, node, chroma, QUERY, 4)
        assert text_of(searched).startswith(f"[1] Archiv: {ARCHIVE} (Ebene: chunk, Seite: ")
        as_json = await session.call_tool(
            "search_archives",
            {"query": QUERY, "top_k": 2, "rag_config": rag_config(chroma), "format": "json"},
        )
        doc = json.loads(text_of(as_json))
        assert doc["status"] == "ok" and [r["rank"] for r in doc["results"]] == [1, 2]
        assert doc["archives"][0]["route"] == "direct"


@pytest.mark.anyio
async def test_over_http_errors_are_tool_errors_with_the_bus_code(
    node: MeshNode, member_key: str, chroma: tuple[ChromaServer, BuiltArchive]
) -> None:
    async with over_http(node, member_key) as session:
        personal = await session.call_tool("rag_query", {"corpus": "personal", "query": "spare key"})
        assert personal.is_error and text_of(personal).startswith("unauthorized: the personal corpus")
        assert (personal.structured_content or {})["error"] == "unauthorized"
        too_many = await session.call_tool("search_archives", {"query": "x", "top_k": 50})
        assert too_many.is_error and text_of(too_many).startswith("bad_request: top_k:")
        unknown_field = await session.call_tool("list_corpora", {"everything": True})
        assert unknown_field.is_error and "everything" in text_of(unknown_field)
        missing = await session.call_tool("rag_query", {"corpus": "no-such-corpus", "query": "x"})
        assert missing.is_error and text_of(missing).startswith("not_found:")
        no_tool = await session.call_tool("format_disk", {})
        assert no_tool.is_error and text_of(no_tool).startswith("not_found: no tool")
        # a server the node's allow-list does not name is never asked: the seed's "no archives"
        outside = rag_config(chroma)
        outside["archives"][0]["chromadb_url"] = "http://127.0.0.1:1"  # loopback, but not allowed
        refused = await session.call_tool("search_archives", {"query": QUERY, "rag_config": outside})
        assert not refused.is_error and text_of(refused) == "Keine Archive verfügbar."


def test_mcp_over_http_needs_a_live_key(node: MeshNode) -> None:
    key = token_of(person_link(node, "temporary", "member"))
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    with httpx.Client(base_url=ui_url(node), timeout=30) as http:
        assert http.post("/mcp", json=ping, headers=headers).status_code == 401
        bad = http.post("/mcp", json=ping, headers={**headers, "Authorization": "Bearer hn_made-up"})
        assert bad.status_code == 401 and bad.json()["error"]["data"]["error"] == "invalid_api_key"
        good = http.post("/mcp", json=ping, headers={**headers, "Authorization": f"Bearer {key}"})
        assert good.status_code == 200 and {t["name"] for t in good.json()["result"]["tools"]} == TOOLS
        huge = {**ping, "params": {"padding": "x" * (1 << 20)}}
        too_big = http.post("/mcp", json=huge, headers={**headers, "Authorization": f"Bearer {key}"})
        assert too_big.status_code == 413 and too_big.json()["error"]["data"]["error"] == "request_too_large"
        node.cli_json("ui", "token", "revoke", "temporary")
        again = http.post("/mcp", json=ping, headers={**headers, "Authorization": f"Bearer {key}"})
        assert again.status_code == 401


@pytest.mark.anyio
async def test_the_mcp_client_reads_why_a_key_was_refused(node: MeshNode) -> None:
    """The 401 is a JSON-RPC error, so the official client raises it with the node's reason
    (not a bare "Server returned an error response")."""
    from mcp.shared.exceptions import MCPError

    def errors(exc: BaseException) -> list[BaseException]:
        if isinstance(exc, BaseExceptionGroup):
            return [e for sub in exc.exceptions for e in errors(sub)]
        return [exc]

    with pytest.raises(BaseException) as raised:
        async with over_http(node, "hn_made-up"):
            pass
    refused = [e for e in errors(raised.value) if isinstance(e, MCPError)]
    assert refused and "this API key is not valid" in str(refused[0])


# -- stdio ----------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_over_stdio_hearthnet_mcp_calls_each_tool_as_the_owner(
    node: MeshNode, chroma: tuple[ChromaServer, BuiltArchive]
) -> None:
    async with over_stdio(node) as session:
        await check_tools(session)
        names = {
            c["name"] for c in (await session.call_tool("list_corpora", {})).structured_content["corpora"]
        }
        assert {"heating", "personal"} <= names  # the owner sees their own corpus
        diary = await session.call_tool(
            "rag_query", {"corpora": ["personal", "heating"], "query": "spare key"}
        )
        corpora = (diary.structured_content or {})["corpora"]
        assert corpora["personal"]["status"] == "ok" and corpora["heating"]["status"] == "ok"
        first = await session.call_tool(
            "ask", {"question": "When is the boiler serviced?", "corpora": ["heating"], "session": "mcp-test"}
        )
        assert (first.structured_content or {})["citations"]
        searched = await session.call_tool(
            "search_archives", {"query": QUERY, "rag_config": rag_config(chroma)}
        )
        assert text_of(searched) == await anyio.to_thread.run_sync(seed_search, node, chroma, QUERY, 5)
    # the owner's session is the one the CLI continues
    shown = node.cli_json("sessions", "show", "mcp-test")
    assert shown["turns"][0]["question"] == "When is the boiler serviced?"


def test_hearthnet_mcp_without_a_running_node_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "nobody"
    proc = subprocess.run(
        [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(home), "mcp"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("hearthnet: ") and proc.stderr.count("\n") == 1, proc.stderr


# -- the gateway's rag_config ---------------------------------------------------------------------
def test_the_gateway_answers_from_an_archive_of_rag_config_with_citations(
    node: MeshNode, member_key: str, chroma: tuple[ChromaServer, BuiltArchive]
) -> None:
    gateway = openai.OpenAI(base_url=ui_url(node) + "/v1", api_key=member_key, max_retries=0, timeout=60)
    answer = gateway.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUERY}],
        extra_body={"rag_config": rag_config(chroma)},
    )
    extra = (answer.model_extra or {})["hearthnet"]
    assert extra["rag"] == "used" and set(extra["corpora"]) == {f"archive:{ARCHIVE}"}
    cited = extra["citations"][0]
    assert cited["corpus"] == ARCHIVE and cited["file"] == ARCHIVE and cited["page"] >= 1
    chunk_ids = {s.id for s in chroma[1].layer("chunk")}
    assert cited["chunk_id"] in chunk_ids
    assert f"[{ARCHIVE}#{cited['chunk_id']}]" in (answer.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError, match=r"rag_config.archives\[0\].collection_name"):
        gateway.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": QUERY}],
            extra_body={"rag_config": {"archives": [{"name": "x", "collection_name": "a/b"}]}},
        )
