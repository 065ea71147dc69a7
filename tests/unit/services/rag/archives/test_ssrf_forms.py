"""``search_archives`` never sends a request to a server a caller names in ``rag_config`` unless
this node's allow-list holds it, however the URL is spelled (issue 29's attack: 78 SSRF forms).

A real HTTP server on loopback (the canary) records every request; the allow-list names another
server.  Each spelling that points at the canary is refused when ``rag_config`` is read
(credentials, a query, a fragment, another scheme, no host) or answered "not in this node's
rag.archive_urls" by the search; the canary hears nothing.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from hearthnet.config.archives import ArchiveDefaults
from hearthnet.errors import BadRequest
from hearthnet.services.rag.archives.search_tool import ArchiveSearch, parse_rag_config
from tests.unit.bus.test_bus import mesh

ALLOWED = "http://archive.example:8000"
COLLECTION = "repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890"


@pytest.fixture
def canary() -> Iterator[tuple[int, list[str]]]:
    heard: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            heard.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = do_HEAD = _any

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], heard
    finally:
        server.shutdown()
        server.server_close()


def forms(port: int) -> list[str]:
    """Spellings of the canary's address (and of tricks that hide it behind the allowed one)."""
    p = port
    return [
        f"http://127.0.0.1:{p}",
        f"HTTP://127.0.0.1:{p}/",
        f"http://localhost:{p}",
        f"http://127.1:{p}",
        f"http://2130706433:{p}",
        f"http://0x7f000001:{p}",
        f"http://0177.0.0.1:{p}",
        f"http://127.0.0.1.:{p}",
        f"http://[::ffff:127.0.0.1]:{p}",
        f"http://[::1]:{p}",
        f"http://0.0.0.0:{p}",
        f"http://127.0.0.1:{p}/archive.example:8000",
        f"http://archive.example:8000@127.0.0.1:{p}",
        f"http://127.0.0.1:{p}@archive.example:8000",
        f"http://127.0.0.1:{p}\\@archive.example:8000",
        f"http://archive.example:8000\\@127.0.0.1:{p}",
        f"http://archive.example%40127.0.0.1:{p}",
        f"http://127.0.0.1:{p}#@archive.example:8000",
        f"http://127.0.0.1:{p}?@archive.example:8000",
        f"http://127.0.0.1:{p}/?x=http://archive.example:8000",
        f" http://127.0.0.1:{p} ",
        f"http://archive.example:8000.127.0.0.1.nip.io:{p}",
        f"https://127.0.0.1:{p}",
        f"ftp://127.0.0.1:{p}",
        f"gopher://127.0.0.1:{p}/_GET",
        f"file:///etc/passwd?{p}",
        f"http:///127.0.0.1:{p}",
        f"//127.0.0.1:{p}",
        f"127.0.0.1:{p}",
        f"http://127.0.0.1:{p + 65536}",
        f"http://user:pw@127.0.0.1:{p}",
    ]


@pytest.mark.anyio
async def test_no_spelling_of_an_unlisted_server_makes_this_node_ask_it(
    canary: tuple[int, list[str]],
) -> None:
    port, heard = canary
    refused_on_reading = asked_nothing = 0
    async with mesh(1) as m:
        (bus,) = m.buses
        tool = ArchiveSearch(bus, allowed_urls=[ALLOWED], layer="chunk", query_timeout=5.0, embed_timeout=5.0)
        try:
            for url in forms(port):
                entry = {"name": "X", "collection_name": COLLECTION, "chromadb_url": url}
                try:
                    refs = parse_rag_config({"archives": [entry]}, ArchiveDefaults())
                except BadRequest:
                    refused_on_reading += 1
                    continue
                outcome = await tool.search("Audits", refs, top_k=3)
                (fate,) = outcome.archives
                assert fate.status == "unavailable" and fate.error is not None, (url, fate)
                assert "not in this node's rag.archive_urls" in fate.error.message, (url, fate.error)
                asked_nothing += 1
        finally:
            await tool.aclose()
    assert heard == [], heard
    assert refused_on_reading + asked_nothing == len(forms(port))
    assert refused_on_reading >= 8 and asked_nothing >= 10, (refused_on_reading, asked_nothing)
