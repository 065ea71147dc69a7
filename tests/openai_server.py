"""A real HTTP server on 127.0.0.1 speaking the OpenAI ``/v1/embeddings`` protocol.

Stands in for a remote embedding server (TEI, vLLM, Ollama) that cannot run
here.  Its vectors are a hashed bag of words, so texts sharing words are
close: enough for retrieval to behave sensibly in tests.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIM = 64


def bag_of_words_vector(text: str, dim: int = DIM) -> list[float]:
    vec = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        h = hashlib.blake2b(word.encode(), digest_size=4).digest()
        vec[int.from_bytes(h, "big") % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec] if any(vec) else [1.0 / math.sqrt(dim)] * dim


class OpenAIEmbeddingServer:
    def __init__(self, model: str, dim: int = DIM) -> None:
        self.model = model
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                if self.path != "/v1/embeddings" or body.get("model") != outer.model:
                    self._send(404, {"error": {"message": "no such model"}})
                    return
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = [
                    {"object": "embedding", "index": i, "embedding": bag_of_words_vector(t, dim)}
                    for i, t in enumerate(inputs)
                ]
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": outer.model,
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
