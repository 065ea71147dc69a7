"""A real HTTP server on 127.0.0.1 speaking both rerank protocols, with a deterministic scorer.

Stands in for a cross-encoder server (a GPU box running TEI, Jina, vLLM), which
cannot run here: no PyPI package ships a cross-encoder's weights.

Routes, in the real servers' shapes:

- ``POST /rerank`` (TEI) ``{query, texts, truncate?, raw_scores?, return_text?}`` ->
  ``[{index, score, text?}]`` sorted by score; more than ``max_batch`` texts (TEI's
  ``--max-client-batch-size``, 32) is HTTP 413 ``{error, error_type}``;
- ``POST /v1/rerank`` (Cohere / Jina) ``{model, query, documents, top_n?, return_documents?}`` ->
  ``{id, model, results: [{index, relevance_score, document?}], usage}`` sorted by score, cut
  to ``top_n``; an unknown ``model`` is HTTP 404 ``{detail}``;
- ``GET /health`` -> 200; ``GET /info`` -> TEI's info of a reranker.

The scorer: a text holding a phrase of ``server.boost`` scores that phrase's value (the
highest if several), any other the share of the query's words it holds (0..1).
``server.mode`` makes it misbehave on purpose: ``normal``; ``busy`` (429 with
``Retry-After: server.retry_after``); ``error`` (HTTP ``server.status``); ``stall`` (nothing
until ``release`` is set, or 60 s); ``hang_up`` (the connection closed without an answer);
``malformed`` (a body that is not JSON); ``short`` (one score missing); ``out_of_range`` (an
index past the texts); ``duplicate`` (index 0 twice); ``nan`` (a NaN score).
It logs requests (route, model, number of texts), never their text; ``peak_in_flight``
is the most requests it held at once.  ``python -m tests.rerank_server`` runs one alone.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import unicodedata
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "test/word-overlap-reranker"
MODES = (
    "normal",
    "busy",
    "error",
    "stall",
    "hang_up",
    "malformed",
    "short",
    "out_of_range",
    "duplicate",
    "nan",
)
STALL_SECONDS = 60.0
MAX_BODY = 32 * 1024 * 1024
_WORD = re.compile(r"\w+", re.UNICODE)
_TEXT_FIELDS = frozenset({"query", "texts", "documents"})


def words(text: str) -> set[str]:
    return set(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def overlap_score(query: str, text: str, boost: Mapping[str, float] | None = None) -> float:
    """The scorer: a boosted phrase's value, else the share of the query's words ``text`` holds."""
    boosted = [value for phrase, value in (boost or {}).items() if phrase in text]
    if boosted:
        return max(boosted)
    wanted = words(query)
    return len(wanted & words(text)) / len(wanted) if wanted else 0.0


class RerankServer:
    """Start it, point a ``[[rerank.servers]]`` at ``url``, ``close()`` it; attributes steer its answers."""

    def __init__(
        self, model: str = MODEL, *, port: int = 0, api_key: str | None = None, max_batch: int = 32
    ) -> None:
        """``api_key``: requests without ``Authorization: Bearer <api_key>`` are answered 401."""
        self.model = model
        self.api_key = api_key
        self.max_batch = max_batch
        self.mode = "normal"
        self.status = 500
        self.retry_after = "2"
        self.boost: dict[str, float] = {}
        self.release = threading.Event()
        self.requests: list[tuple[str, str, int]] = []
        """``(route, model, texts)`` of every rerank request, in order (no text)."""
        self.options: list[dict[str, Any]] = []
        """The other fields of each rerank request (``truncate``, ``top_n`` ...), in order."""
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def setup(self) -> None:
                super().setup()
                with owner._lock:
                    owner._connections.add(self.connection)

            def finish(self) -> None:
                with owner._lock:
                    owner._connections.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/info":
                    self._send(
                        200,
                        {
                            "model_id": owner.model,
                            "model_type": {"reranker": {"id2label": {"0": "LABEL_0"}}},
                            "max_input_length": 512,
                            "max_client_batch_size": owner.max_batch,
                        },
                    )
                else:
                    self._send(404, {"error": "Not Found", "error_type": "NotFound"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY:
                    self._send(413, {"error": "payload size", "error_type": "Validation"})
                    return
                raw = self.rfile.read(length)
                if self.path not in ("/rerank", "/v1/rerank"):
                    self._send(404, {"error": "Not Found", "error_type": "NotFound"})
                    return
                if (
                    owner.api_key is not None
                    and self.headers.get("Authorization") != f"Bearer {owner.api_key}"
                ):
                    self._send(401, {"error": "Unauthorized", "error_type": "Unauthorized"})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(422, {"error": "invalid JSON", "error_type": "Validation"})
                    return
                with owner._lock:
                    owner.in_flight += 1
                    owner.peak_in_flight = max(owner.peak_in_flight, owner.in_flight)
                try:
                    self._rerank(body if isinstance(body, dict) else {})
                finally:
                    with owner._lock:
                        owner.in_flight -= 1

            def _rerank(self, body: dict[str, Any]) -> None:
                tei = self.path == "/rerank"
                query = body.get("query")
                texts = body.get("texts") if tei else body.get("documents")
                if isinstance(texts, list) and not tei:
                    texts = [t.get("text") if isinstance(t, dict) else t for t in texts]
                if not isinstance(query, str) or not isinstance(texts, list) or not texts:
                    self._send(
                        422, {"error": "query and 1 or more texts are required", "error_type": "Validation"}
                    )
                    return
                if not all(isinstance(t, str) for t in texts):
                    self._send(422, {"error": "texts must be strings", "error_type": "Validation"})
                    return
                model = owner.model if tei else body.get("model")
                if not tei and model != owner.model:
                    self._send(404, {"detail": f"model {str(model)[:60]!r} not found"})
                    return
                if len(texts) > owner.max_batch:
                    self._send(
                        413,
                        {
                            "error": f"batch size {len(texts)} > maximum allowed batch size "
                            f"{owner.max_batch}",
                            "error_type": "Validation",
                        },
                    )
                    return
                with owner._lock:
                    owner.requests.append((self.path, str(model), len(texts)))
                    owner.options.append({k: v for k, v in body.items() if k not in _TEXT_FIELDS})
                mode = owner.mode
                if mode == "busy":
                    self._send(
                        429, {"error": "Model is overloaded", "error_type": "Overloaded"}, owner.retry_after
                    )
                    return
                if mode == "error":
                    self._send(owner.status, {"error": "inference failed", "error_type": "Backend"})
                    return
                if mode == "stall":
                    owner.release.wait(STALL_SECONDS)
                if mode == "hang_up":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "malformed":
                    self._send_raw(200, b"[{index: 0, score")
                    return
                scores = [overlap_score(query, t, owner.boost) for t in texts]
                indices = list(range(len(texts)))
                if mode == "nan":
                    scores[0] = float("nan")
                order = sorted(indices, key=lambda i: -scores[i])
                pairs = [(i, scores[i]) for i in order]
                if mode == "short":
                    pairs = pairs[:-1]
                elif mode == "out_of_range":
                    pairs[-1] = (len(texts), pairs[-1][1])
                elif mode == "duplicate":
                    pairs[-1] = (pairs[0][0], pairs[-1][1])
                if tei:
                    with_text = body.get("return_text") is True
                    self._send(
                        200,
                        [
                            {"index": i, "score": s, **({"text": texts[i]} if with_text else {})}
                            for i, s in pairs
                        ],
                    )
                    return
                top_n = body.get("top_n")
                if isinstance(top_n, int) and not isinstance(top_n, bool) and top_n > 0:
                    pairs = pairs[:top_n]
                with_docs = body.get("return_documents") is True
                results = [
                    {
                        "index": i,
                        "relevance_score": s,
                        **({"document": {"text": texts[i]}} if with_docs else {}),
                    }
                    for i, s in pairs
                ]
                tokens = sum(len(words(t)) for t in texts) + len(words(query)) * len(texts)
                self._send(
                    200,
                    {
                        "id": "rr-1",
                        "model": owner.model,
                        "results": results,
                        "usage": {"total_tokens": tokens},
                    },
                )

            def _send(self, status: int, payload: Any, retry_after: str | None = None) -> None:
                self._send_raw(status, json.dumps(payload).encode(), retry_after)

            def _send_raw(self, status: int, raw: bytes, retry_after: str | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.end_headers()
                self.wfile.write(raw)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # a client that went away mid-answer (a timeout test) is not an error here

        self.httpd = Server(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="rerank-server", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop as a server process does: no new connections, and the open ones (kept alive) closed."""
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its handler
        self._thread.join(timeout=5)

    def __enter__(self) -> RerankServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args()
    server = RerankServer(args.model, port=args.port)
    print(f"rerank stand-in {server.model} on {server.url} (/rerank and /v1/rerank)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":
    main()
