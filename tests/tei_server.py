"""A real HTTP server on 127.0.0.1 speaking Text Embeddings Inference (TEI): a second embedding model.

The seeds' archives were embedded by a TEI server (``jinaai/jina-embeddings-v2-base-de``,
768-d); no second model can be downloaded here, so this server stands in for
one with a deterministic encoder: hashed character n-grams and words, signed,
sub-linear counts, L2-normalised.  Texts sharing words and word pieces are
close (a sentence and the passage holding it are very close), unrelated ones
near orthogonal, so retrieval behaves like a real model's.

Routes, in TEI's shapes:

- ``POST /v1/embeddings`` ``{model, input: str | [str]}`` -> ``{object, data: [{object, index,
  embedding}], model, usage}`` (OpenAI-compatible; an unknown ``model`` is HTTP 404);
- ``POST /embed`` ``{inputs: str | [str], normalize?}`` -> ``[[float]]`` (TEI's native route,
  the server's first model);
- ``GET /info`` -> ``{model_id, max_input_length, ...}``; ``GET /health`` -> 200.

It keeps a log of requests (route, model, number of inputs), never their text.
Run it alone: ``python -m tests.tei_server --port 8080``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import threading
import unicodedata
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "test/char-ngram-768"
"""The stand-in second model: 768-d like the seeds' jina model (a different name: it is not jina)."""
DIM = 768
NGRAM = 4
MAX_INPUTS = 512
MAX_BODY = 32 * 1024 * 1024

_WORD = re.compile(r"\w+", re.UNICODE)


def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % dim, (1.0 if (value >> 63) & 1 else -1.0)


def ngram_vector(text: str, dim: int = DIM) -> list[float]:
    """The encoder: words (weight 2) and character ``NGRAM``-grams of each padded word, hashed into
    ``dim`` signed buckets, ``1 + log(count)`` per feature, L2-normalised.  Deterministic."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    counts: dict[str, int] = {}
    for word in words:
        counts["w:" + word] = counts.get("w:" + word, 0) + 2
        padded = f"<{word}>"
        for i in range(max(1, len(padded) - NGRAM + 1)):
            gram = "g:" + padded[i : i + NGRAM]
            counts[gram] = counts.get(gram, 0) + 1
    vec = [0.0] * dim
    for feature, count in counts.items():
        slot, sign = _bucket(feature, dim)
        vec[slot] += sign * (1.0 + math.log(count))
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:  # no word at all: a fixed unit vector (TEI never answers a zero vector)
        return [1.0 / math.sqrt(dim)] * dim
    return [v / norm for v in vec]


class TEIServer:
    """Serves ``models`` (name -> dimension) on 127.0.0.1; the first is the one ``/embed`` uses."""

    def __init__(self, models: Mapping[str, int] | None = None, *, port: int = 0) -> None:
        self.models = dict(models or {MODEL: DIM})
        if not self.models:
            raise ValueError("a TEI server serves at least one model")
        self.default_model = next(iter(self.models))
        self.requests: list[tuple[str, str, int]] = []
        """``(route, model, inputs)`` of every embedding request, in order (no text)."""
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/info":
                    self._send(
                        200,
                        {
                            "model_id": owner.default_model,
                            "model_dtype": "float32",
                            "model_type": {"embedding": {"pooling": "mean"}},
                            "max_input_length": 8192,
                            "max_client_batch_size": MAX_INPUTS,
                        },
                    )
                else:
                    self._send(404, {"error": "Not Found", "error_type": "NotFound"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY:
                    self._send(413, {"error": "payload size", "error_type": "Validation"})
                    return
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    self._send(422, {"error": "invalid JSON", "error_type": "Validation"})
                    return
                if self.path == "/v1/embeddings":
                    self._openai(body)
                elif self.path == "/embed":
                    self._native(body)
                else:
                    self._send(404, {"error": "Not Found", "error_type": "NotFound"})

            def _inputs(self, value: Any) -> list[str] | None:
                texts = [value] if isinstance(value, str) else value
                if not isinstance(texts, list) or not 0 < len(texts) <= MAX_INPUTS:
                    return None
                return texts if all(isinstance(t, str) for t in texts) else None

            def _openai(self, body: Any) -> None:
                model = body.get("model") if isinstance(body, dict) else None
                texts = self._inputs(body.get("input")) if isinstance(body, dict) else None
                if model not in owner.models:
                    self._send(404, {"error": {"message": f"model {model!r} is not served here"}})
                    return
                if texts is None:
                    self._send(422, {"error": {"message": "input must be a string or 1-512 strings"}})
                    return
                owner._record("/v1/embeddings", model, len(texts))
                dim = owner.models[model]
                data = [
                    {"object": "embedding", "index": i, "embedding": ngram_vector(t, dim)}
                    for i, t in enumerate(texts)
                ]
                tokens = sum(len(_WORD.findall(t)) for t in texts)
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": model,
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                    },
                )

            def _native(self, body: Any) -> None:
                texts = self._inputs(body.get("inputs")) if isinstance(body, dict) else None
                if texts is None:
                    self._send(
                        422, {"error": "inputs must be a string or 1-512 strings", "error_type": "Validation"}
                    )
                    return
                owner._record("/embed", owner.default_model, len(texts))
                dim = owner.models[owner.default_model]
                self._send(200, [ngram_vector(t, dim) for t in texts])

            def _send(self, status: int, payload: Any) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        class Server(ThreadingHTTPServer):
            def verify_request(self, request: Any, client_address: Any) -> bool:
                with owner._lock:
                    owner.connections += 1
                return True

        self.connections = 0
        """TCP connections accepted (a test can tell "never contacted" from "contacted, refused")."""
        self.httpd = Server(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="tei-server", daemon=True
        )
        self._thread.start()

    def _record(self, route: str, model: str, inputs: int) -> None:
        with self._lock:
            self.requests.append((route, model, inputs))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> TEIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server = TEIServer(port=args.port)
    print(f"TEI stand-in for {server.default_model} ({DIM}-d) on {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":
    main()
