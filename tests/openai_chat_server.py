"""A real HTTP server on 127.0.0.1 speaking OpenAI's chat and completion protocols, SSE included.

Stands in for an LLM server (Ollama, llama.cpp, vLLM, OpenAI) that cannot run
here.  Deterministic: it answers ``server.reply`` if set, otherwise a sentence
citing the first ``[name#id]`` marker found in the prompt (so answer-composer
tests can check citations).  ``server.mode`` makes it misbehave on purpose:

* ``normal``      answer (streamed as one chunk per word, with usage when asked)
* ``no_usage``    answer, never sending ``usage``
* ``busy``        HTTP 429 with ``Retry-After: server.retry_after``
* ``error``       HTTP ``server.status`` (500) with an OpenAI-style error body
* ``stall_first`` headers sent, then nothing until ``release`` is set (or 60 s)
* ``stall_mid``   ``hold_after`` words, then nothing until ``release`` (or 60 s)
* ``malformed``   one word, then a chunk that is not JSON
* ``hang_up``     one word, then the connection is closed without finishing

``hold_after`` with mode ``normal`` pauses (until ``release``) after that many
words: a test can then see pieces arrive before the answer is complete.
``hostile`` makes it obey a document that says "see [secret-plans.pdf#p4]": the
answer (:func:`hostile_reply`) cites the first context line, then chunks never
retrieved in markers of every shape (:data:`BOGUS_MARKERS`).  ``piece_chars``
streams the answer in pieces of that many characters instead of words, so a
marker is split across deltas.
``cite_each_file`` makes the default answer cite the first context line of each
file instead (the composer's ``From file#id (page N)`` lines), so an answer
can cite passages of several corpora.  ``first_token_delay`` (seconds) is
waited before the first word, so a benchmark can measure the server's own
time to first token.  ``python -m tests.openai_chat_server`` runs one as a
process of its own and prints its port.
While it waits, the server watches the socket: a client that closed it is
counted in ``disconnects`` and sets ``disconnected``.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = re.compile(r"\[([^\[\]\s#]+#[^\[\]\s]+)\]")
CONTEXT_LINE = re.compile(r"From ([^\[\]\s#]+)#([^\[\]\s]+) \(page")
MODES = ("normal", "no_usage", "busy", "error", "stall_first", "stall_mid", "malformed", "hang_up")
STALL_SECONDS = 60.0


def default_reply(prompt: str) -> str:
    """The deterministic answer to ``prompt``: it cites the first ``[name#id]`` marker there."""
    found = MARKER.search(prompt)
    if found is None:
        return "I cannot find that in the documents."
    return f"According to the documents, the answer is given in [{found.group(1)}]."


BOGUS_MARKERS = (
    "[secret-plans.pdf#p4]",
    "[a#b]",
    "[x y#§1]",
    "[nothing-here.pdf#deadbeefcafe0000]",
)
"""Citations of chunks never retrieved, of every shape a check might let through."""


def hostile_reply(prompt: str) -> str:
    """An answer that cites the first context line of ``prompt``, then, mid-answer, chunks that
    were never retrieved (:data:`BOGUS_MARKERS`)."""
    first = CONTEXT_LINE.search(prompt)
    real = f" [{first.group(1)}#{first.group(2)}]" if first else ""
    bogus = " ".join(BOGUS_MARKERS)
    return (
        f"According to the documents{real}, the answer is there. See also {bogus} for the plans, "
        f"and the summary{real}."
    )


def reply_citing_each_file(prompt: str) -> str:
    """An answer citing the first context line of each file in ``prompt``, in their order."""
    first: dict[str, str] = {}
    for name, chunk_id in CONTEXT_LINE.findall(prompt):
        first.setdefault(name, chunk_id)
    if not first:
        return "I cannot find that in the documents."
    cited = " and ".join(f"in [{name}#{chunk_id}]" for name, chunk_id in first.items())
    return f"According to the documents, the answer is given {cited}."


def words_of(text: str) -> list[str]:
    """``text`` as the pieces the server streams: each word with the space before it."""
    return re.findall(r"\s*\S+", text)


class OpenAIChatServer:
    """Start it, point a backend at ``url``, ``close()`` it; attributes steer the next answers."""

    def __init__(
        self, models: tuple[str, ...] = ("test-chat",), *, port: int = 0, api_key: str | None = None
    ) -> None:
        """``api_key``: requests without ``Authorization: Bearer <api_key>`` are answered 401."""
        self.models = models
        self.api_key = api_key
        self.mode = "normal"
        self.reply: str | None = None
        self.retry_after: str | None = "2"
        self.status = 500
        self.hold_after: int | None = None
        self.cite_each_file = False
        self.hostile = False
        self.piece_chars: int | None = None
        self.first_token_delay = 0.0
        self.release = threading.Event()
        self.disconnected = threading.Event()
        self.disconnects = 0
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.first_byte_at: float | None = None
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _authorized(self) -> bool:
                if outer.api_key is None or self.headers.get("Authorization") == f"Bearer {outer.api_key}":
                    return True
                self._json(401, {"error": {"message": "invalid api key", "type": "authentication_error"}})
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return None
                if self.path != "/v1/models":
                    return self._json(404, {"error": {"message": "not found", "type": "not_found_error"}})
                data = [{"id": m, "object": "model", "owned_by": "test"} for m in outer.models]
                self._json(200, {"object": "list", "data": data})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self._authorized():
                    return None
                with outer._lock:
                    outer.requests.append(body)
                    outer.paths.append(self.path)
                chat = self.path == "/v1/chat/completions"
                if self.path not in ("/v1/chat/completions", "/v1/completions"):
                    return self._json(404, {"error": {"message": "no such endpoint"}})
                if body.get("model") not in outer.models:
                    msg = f"model '{body.get('model')}' not found"
                    return self._json(404, {"error": {"message": msg, "type": "not_found_error"}})
                mode = outer.mode
                if mode == "busy":
                    headers = {"Retry-After": outer.retry_after} if outer.retry_after is not None else {}
                    return self._json(429, {"error": {"message": "too many requests"}}, headers)
                if mode == "error":
                    crash = {"message": "the model crashed", "type": "server_error"}
                    headers = {"Retry-After": outer.retry_after} if outer.retry_after is not None else {}
                    return self._json(outer.status, {"error": crash}, headers)
                prompt = _prompt_of(body, chat)
                words, finish = outer._answer(prompt, body)
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words)}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                if not body.get("stream"):
                    text = "".join(words)
                    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
                    if chat:
                        choice["message"] = {"role": "assistant", "content": text}
                    else:
                        choice["text"] = text
                    payload: dict[str, Any] = {"id": "x", "object": "chat.completion", "choices": [choice]}
                    if mode != "no_usage":
                        payload["usage"] = usage
                    return self._json(200, payload)
                self._stream(words, finish, usage, chat, body)

            def _stream(
                self, words: list[str], finish: str, usage: dict[str, int], chat: bool, body: dict[str, Any]
            ) -> None:
                mode = outer.mode
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                with outer._lock:
                    outer.first_byte_at = time.monotonic()
                try:
                    if mode == "stall_first":
                        return self._stall()
                    if chat:
                        self._event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
                    hold = outer.hold_after if mode in ("normal", "no_usage", "stall_mid") else None
                    if mode == "stall_mid" and hold is None:
                        hold = 1
                    for i, word in enumerate(words):
                        if i == 0 and outer.first_token_delay > 0:
                            time.sleep(outer.first_token_delay)
                        if hold is not None and i == hold:
                            if not self._stall() or mode == "stall_mid":
                                return
                        piece = {"delta": {"content": word}} if chat else {"text": word}
                        self._event({"choices": [{"index": 0, **piece, "finish_reason": None}]})
                        if mode == "malformed":
                            self._chunk(b"data: {this is not json\n\n")
                            return self._end()
                        if mode == "hang_up":
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                    last = {"delta": {}} if chat else {"text": ""}
                    self._event({"choices": [{"index": 0, **last, "finish_reason": finish}]})
                    wants_usage = (body.get("stream_options") or {}).get("include_usage")
                    if wants_usage and mode != "no_usage":
                        self._event({"choices": [], "usage": usage})
                    self._chunk(b"data: [DONE]\n\n")
                    self._end()
                except (BrokenPipeError, ConnectionResetError):
                    outer._saw_disconnect()

            def _stall(self) -> bool:
                """Wait for ``release``; ``False`` if the client closed the connection meanwhile."""
                deadline = time.monotonic() + STALL_SECONDS
                while time.monotonic() < deadline:
                    if outer.release.wait(0.01):
                        return True
                    if _peer_closed(self.connection):
                        outer._saw_disconnect()
                        self.close_connection = True
                        return False
                return True

            def _event(self, payload: dict[str, Any]) -> None:
                self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _end(self) -> None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = _QuietServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def _answer(self, prompt: str, body: dict[str, Any]) -> tuple[list[str], str]:
        if self.reply is not None:
            text = self.reply
        elif self.hostile:
            text = hostile_reply(prompt)
        else:
            text = reply_citing_each_file(prompt) if self.cite_each_file else default_reply(prompt)
        finish = "stop"
        stop = body.get("stop") or []
        for s in [stop] if isinstance(stop, str) else stop:
            if s in text:
                text = text[: text.index(s)]
        if self.piece_chars:
            n = self.piece_chars
            words = [text[i : i + n] for i in range(0, len(text), n)]
        else:
            words = words_of(text)
        limit = body.get("max_tokens")
        if isinstance(limit, int) and len(words) > limit:
            words, finish = words[:limit], "length"
        return words, finish

    def _saw_disconnect(self) -> None:
        with self._lock:
            self.disconnects += 1
        self.disconnected.set()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIChatServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed its keep-alive connection is normal here; anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _prompt_of(body: dict[str, Any], chat: bool) -> str:
    if not chat:
        return str(body.get("prompt", ""))
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def _peer_closed(sock: socket.socket) -> bool:
    """The client closed its end: the socket reads as ready and yields no bytes."""
    # poll, not select: a long test run holds more than FD_SETSIZE (1024)
    # descriptors, and select() refuses a socket numbered above that.
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    try:
        if not poller.poll(0):
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def main(argv: list[str] | None = None) -> None:
    """Serve until killed; the port is the first line printed."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.openai_chat_server")
    parser.add_argument("--model", action="append", help="model name (repeatable; default: test-chat)")
    parser.add_argument("--first-token-delay", type=float, default=0.0, help="seconds before the first word")
    parser.add_argument("--cite-each-file", action="store_true", help="cite each file's first context line")
    parser.add_argument("--hostile", action="store_true", help="cite chunks never retrieved, mid-answer")
    parser.add_argument("--piece-chars", type=int, help="stream pieces of N characters instead of words")
    args = parser.parse_args(argv)
    server = OpenAIChatServer(tuple(args.model or ["test-chat"]))
    server.first_token_delay = args.first_token_delay
    server.cite_each_file = args.cite_each_file
    server.hostile = args.hostile
    server.piece_chars = args.piece_chars
    print(server.port, flush=True)
    try:
        threading.Event().wait()
    finally:
        server.close()


if __name__ == "__main__":
    main()
