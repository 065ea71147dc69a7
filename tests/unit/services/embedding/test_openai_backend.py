"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from hearthnet.errors import BadRequest, InternalError, Partition, Timeout
from hearthnet.services.embedding import OpenAIBackendConfig, OpenAIEmbeddingBackend

DIM = 8


def vector_for(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255.0 + 0.01 for b in digest[:DIM]]


class _Server:
    def __init__(self) -> None:
        self.auth_headers: list[str | None] = []
        self.unblock = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.auth_headers.append(self.headers.get("Authorization"))
                if self.path != "/v1/embeddings":
                    return self._send(404, b"{}")
                model, texts = body["model"], body["input"]
                if model == "slow":
                    owner.unblock.wait(10)
                if model == "broken":
                    return self._send(500, b'{"error": "boom"}')
                if model == "garbage":
                    return self._send(200, b"not json{")
                dim = DIM + 1 if model == "wide" else DIM
                data = [
                    {"object": "embedding", "index": i, "embedding": [*vector_for(t), 0.5][:dim]}
                    for i, t in enumerate(texts)
                ]
                if model == "short":
                    data = data[:-1]
                data.reverse()  # servers may answer out of order; index decides
                payload = {"data": data, "model": model, "usage": {"prompt_tokens": 3 * len(texts)}}
                self._send(200, json.dumps(payload).encode())

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.unblock.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.close()


def _backend(url: str, model: str = "good", **kw: Any) -> OpenAIEmbeddingBackend:
    environ = kw.pop("environ", {})
    return OpenAIEmbeddingBackend(
        OpenAIBackendConfig(base_url=url, model=model, dim=DIM, **kw), environ=environ
    )


@pytest.mark.anyio
async def test_success_in_order_and_normalized(server: _Server) -> None:
    backend = _backend(server.url)
    try:
        texts = ["alpha", "beta", "gamma"]
        batch = await backend.embed(texts, normalize=True)
        raw = await backend.embed(texts, normalize=False)
    finally:
        await backend.aclose()
    expected = np.array([vector_for(t) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(raw.vectors, expected, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(batch.vectors, axis=1), 1.0, atol=1e-6)
    assert batch.tokens == 9
    assert batch.truncated == 0


@pytest.mark.anyio
async def test_large_request_is_split(server: _Server) -> None:
    backend = _backend(server.url, max_texts_per_request=4)
    try:
        texts = [f"t{i}" for i in range(10)]
        batch = await backend.embed(texts, normalize=False)
    finally:
        await backend.aclose()
    np.testing.assert_allclose(batch.vectors, np.array([vector_for(t) for t in texts]), rtol=1e-6)


@pytest.mark.anyio
async def test_api_key_header_sent_when_configured(server: _Server) -> None:
    server.auth_headers.clear()
    backend = _backend(server.url, api_key_env="HN_TEST_EMBED_KEY", environ={"HN_TEST_EMBED_KEY": "s3cret"})
    plain = _backend(server.url)
    try:
        await backend.embed(["x"], normalize=True)
        await plain.embed(["x"], normalize=True)
    finally:
        await backend.aclose()
        await plain.aclose()
    assert server.auth_headers == ["Bearer s3cret", None]


def test_missing_api_key_variable_is_a_config_error() -> None:
    with pytest.raises(BadRequest, match="HN_TEST_UNSET"):
        _backend("http://127.0.0.1:1", api_key_env="HN_TEST_UNSET", environ={})


@pytest.mark.anyio
async def test_server_down_is_partition() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = _backend(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(Partition, match="unreachable"):
            await backend.embed(["x"], normalize=True)
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_slow_server_is_timeout(server: _Server) -> None:
    backend = _backend(server.url, model="slow", timeout_seconds=0.3)
    try:
        with pytest.raises(Timeout, match=r"0\.3 s"):
            await backend.embed(["x"], normalize=True)
    finally:
        await backend.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("broken", "HTTP 500"),
        ("garbage", "malformed JSON"),
        ("wide", "9-d vectors"),
        ("short", "2 embeddings for 3 texts"),
    ],
)
async def test_bad_answers_are_internal_error(server: _Server, model: str, why: str) -> None:
    backend = _backend(server.url, model=model)
    try:
        with pytest.raises(InternalError, match=why):
            await backend.embed(["a", "b", "c"], normalize=True)
    finally:
        await backend.aclose()


def test_a_server_model_without_its_own_timeout_takes_the_embedding_tables() -> None:
    """RAG_EMBED_TIMEOUT_SECONDS is read by the config only (``[embedding] timeout_seconds``)."""
    cfg = OpenAIBackendConfig(base_url="http://127.0.0.1:1", model="m", dim=4)
    assert OpenAIEmbeddingBackend(cfg).timeout_seconds == 10.0
    assert OpenAIEmbeddingBackend(cfg, timeout_seconds=2.5).timeout_seconds == 2.5
    explicit = OpenAIBackendConfig(base_url="http://127.0.0.1:1", model="m", dim=4, timeout_seconds=3)
    assert OpenAIEmbeddingBackend(explicit, timeout_seconds=2.5).timeout_seconds == 3
    with pytest.raises(BadRequest, match="http"):
        OpenAIBackendConfig(base_url="ftp://x", model="m", dim=4)
