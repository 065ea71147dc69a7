"""The archives' ChromaDB client: each failure of a real HTTP server on 127.0.0.1 becomes its bus error.

The happy paths run against a real ``chroma run`` server in ``tests/integration/test_archives.py``;
here a small loopback server answers what ChromaDB would not: garbage, errors, silence.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hearthnet.errors import InternalError, NotFound, Partition, Timeout
from hearthnet.services.rag.archives.client import ChromaHttpClient, CollectionRef
from tests.chroma_fixture import free_port

NAME = "repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890"
REF = CollectionRef(id="2a7bdb2d-b6a6-4991-b0b1-c50629f38ecb", name=NAME, dimension=3, space="cosine")

Answer = Callable[[str], tuple[int, bytes]]


class Scripted:
    """Answers every request with ``answer(path)``; ``hold`` keeps requests waiting until set."""

    def __init__(self, answer: Answer) -> None:
        self.paths: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                owner.paths.append(self.path)
                owner.hold.wait(timeout=10)
                status, body = answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.hold.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def scripted() -> Iterator[Callable[[Answer], Scripted]]:
    servers: list[Scripted] = []

    def make(answer: Answer) -> Scripted:
        servers.append(Scripted(answer))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def body(payload: Any) -> bytes:
    return json.dumps(payload).encode()


@pytest.mark.anyio
async def test_nothing_listening_is_a_partition() -> None:
    client = ChromaHttpClient(f"http://127.0.0.1:{free_port()}", timeout=2.0)
    try:
        with pytest.raises(Partition, match=r"ChromaDB at http://127.0.0.1:\d+ is unreachable: ConnectError"):
            await client.get_collection(NAME)
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_server_that_does_not_answer_in_time_is_a_timeout(
    scripted: Callable[[Answer], Scripted],
) -> None:
    server = scripted(lambda path: (200, body({})))
    server.hold.clear()
    client = ChromaHttpClient(server.url, timeout=0.3)
    try:
        with pytest.raises(Timeout, match=f"did not answer within 0.3 s \\(collection {NAME}\\)"):
            await client.query(REF, [1.0, 0.0, 0.0], n_results=3, where=None, include_text=True)
    finally:
        server.hold.set()
        await client.aclose()


@pytest.mark.anyio
async def test_status_404_is_not_found_naming_the_collection(scripted: Callable[[Answer], Scripted]) -> None:
    server = scripted(
        lambda path: (404, body({"error": "NotFoundError", "message": f"Collection [{NAME}] does not exist"}))
    )
    client = ChromaHttpClient(server.url, timeout=2.0)
    try:
        with pytest.raises(NotFound, match=f"collection {NAME} does not exist on ChromaDB at {server.url}"):
            await client.get_collection(NAME)
    finally:
        await client.aclose()
    assert server.paths == [f"/api/v2/tenants/default_tenant/databases/default_database/collections/{NAME}"]


@pytest.mark.anyio
async def test_another_status_is_internal_with_chromas_error_class_but_never_its_message(
    scripted: Callable[[Answer], Scripted],
) -> None:
    server = scripted(
        lambda path: (400, body({"error": "InvalidArgumentError", "message": "echo of a document"}))
    )
    client = ChromaHttpClient(server.url, timeout=2.0)
    try:
        with pytest.raises(InternalError) as info:
            await client.query(REF, [1.0, 0.0, 0.0], n_results=3, where=None, include_text=True)
    finally:
        await client.aclose()
    assert "answered HTTP 400 (InvalidArgumentError)" in info.value.message
    assert "echo" not in info.value.message


@pytest.mark.parametrize(
    ("answer", "call"),
    [
        (b"not json", "collection"),
        (body({"name": NAME, "dimension": 3}), "collection"),  # no id
        (body({"id": "x", "name": NAME, "dimension": "768"}), "collection"),
        (
            body(
                {
                    "ids": [["a", "b"]],
                    "metadatas": [[{}]],
                    "distances": [[0.1, 0.2]],
                    "documents": [["x", "y"]],
                }
            ),
            "query",
        ),
        (body({"ids": [["a"]], "metadatas": [[{}]], "distances": [["near"]], "documents": [["x"]]}), "query"),
        (
            body({"ids": [["a"]], "metadatas": [[{}]], "distances": [[float("nan")]], "documents": [["x"]]}),
            "query",
        ),
        (body({"ids": "a"}), "query"),
        (body("many"), "count"),
        (body({"ids": ["a"], "metadatas": []}), "get"),
    ],
)
@pytest.mark.anyio
async def test_a_malformed_answer_is_internal(
    scripted: Callable[[Answer], Scripted], answer: bytes, call: str
) -> None:
    server = scripted(lambda path: (200, answer))
    client = ChromaHttpClient(server.url, timeout=2.0)
    try:
        with pytest.raises(InternalError, match=f"ChromaDB at {server.url} answered (a )?malformed"):
            if call == "collection":
                await client.get_collection(NAME)
            elif call == "query":
                await client.query(REF, [1.0, 0.0, 0.0], n_results=2, where=None, include_text=True)
            elif call == "count":
                await client.count(REF)
            else:
                await client.get(REF, where=None, limit=5)
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_collection_and_a_query_as_chromadb_answers_them(
    scripted: Callable[[Answer], Scripted],
) -> None:
    """Shapes recorded from ``chroma run`` 1.5; the space comes from the configuration (or metadata)."""

    def answer(path: str) -> tuple[int, bytes]:
        if path.endswith("/query"):
            return 200, body(
                {
                    "ids": [["a"]],
                    "embeddings": None,
                    "documents": [["A"]],
                    "uris": None,
                    "metadatas": [[{"layer": "chunk", "page_number": 1}]],
                    "distances": [[0.25]],
                    "include": ["documents", "metadatas", "distances"],
                }
            )
        return 200, body(
            {
                "id": REF.id,
                "name": NAME,
                "configuration_json": {"hnsw": {"space": "cosine"}},
                "metadata": {"hnsw:space": "cosine"},
                "dimension": 3,
                "tenant": "default_tenant",
                "database": "default_database",
            }
        )

    server = scripted(answer)
    client = ChromaHttpClient(server.url, timeout=2.0)
    try:
        assert await client.get_collection(NAME) == REF
        res = await client.query(
            REF, [1.0, 0.0, 0.0], n_results=1, where={"layer": {"$eq": "chunk"}}, include_text=True
        )
    finally:
        await client.aclose()
    assert (res.ids, res.documents, res.distances) == (["a"], ["A"], [0.25])
    assert res.metadatas == [{"layer": "chunk", "page_number": 1}]
    assert (
        server.paths[1]
        == f"/api/v2/tenants/default_tenant/databases/default_database/collections/{REF.id}/query"
    )
