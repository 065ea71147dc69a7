"""How many connections the HTTP server holds, and how long it waits for a request's bytes.

uvicorn waits for a request's headers as long as the client likes (its keep-alive timer runs
only *between* requests), so a client that opens connections and sends nothing, or a header a
byte at a time, holds a descriptor each until the node has none left for its own files, links
and control socket (slowloris).  :func:`guarded_protocol` is uvicorn's h11 protocol with:

- a **header timer**: a request's headers must be complete within ``header_seconds`` of its
  first byte (or of the connection's opening); otherwise ``408`` and the connection is closed;
- a **body timer**: while a request's body is being read, ``body_seconds`` without a byte
  closes the connection (the route sees the client gone); a read the server paused itself
  (the route not taking the body yet) does not count;
- **caps**: a connection past ``max_connections`` open, or past ``max_per_client`` from one
  client address, is answered ``503`` and closed at once.

The caps are kept below what the node needs for itself (:func:`connection_limits`: at most half
its descriptor limit).  The bus listener and the control socket are other sockets, never
counted here.  Shed connections are counted and logged at most once a minute
(``http_connections_shed``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

from hearthnet.config import UiConfig

__all__ = ["ConnectionLimits", "ConnectionTally", "connection_limits", "guarded_protocol"]

log = structlog.get_logger("hearthnet.ui")

SHED_LOG_SECONDS: Final = 60.0
"""Shed connections are logged as one summary at most this often."""


def _answer(status: str, code: str, text: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before any request was read
    (so before its door is known): the bus's ``{error, message}``, as the web UI answers."""
    body = json.dumps({"error": code, "message": text}).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}connection: close\r\n\r\n"
    )
    return head.encode() + body


_BUSY: Final = _answer(
    "503 Service Unavailable",
    "capacity_exceeded",
    "too many connections to the node's web UI: retry",
    "retry-after: 5\r\n",
)
_SLOW: Final = _answer("408 Request Timeout", "timeout", "the request's headers came too late")


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    max_per_client: int
    header_seconds: float
    body_seconds: float


def connection_limits(config: UiConfig, open_files: int) -> ConnectionLimits:
    """The caps of ``config``, each at most half of the descriptor limit ``open_files`` (the
    other half is the node's: blobs, stores, bus links, the control socket, worker processes)."""
    ceiling = max(8, open_files // 2)
    total = min(config.max_connections, ceiling)
    return ConnectionLimits(
        max_connections=total,
        max_per_client=min(config.max_connections_per_client, total),
        header_seconds=config.header_timeout_seconds,
        body_seconds=config.body_timeout_seconds,
    )


class ConnectionTally:
    """The open connections, in all and by client address; and the ones shed, for the log."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.by_client: Counter[str] = Counter()
        self.shed: Counter[str] = Counter()
        self._logged = 0.0

    def admit(self, client: str) -> str | None:
        """Count a new connection from ``client``, or say why it is refused (not counted)."""
        if self.total >= self.limits.max_connections:
            return "total"
        if self.by_client[client] >= self.limits.max_per_client:
            return "per_client"
        self.total += 1
        self.by_client[client] += 1
        return None

    def release(self, client: str) -> None:
        self.total -= 1
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]

    def count_shed(self, reason: str) -> None:
        self.shed[reason] += 1
        now = time.monotonic()
        if now - self._logged >= SHED_LOG_SECONDS:
            self._logged = now
            log.warning("http_connections_shed", **dict(self.shed), open=self.total)
            self.shed.clear()


def guarded_protocol(tally: ConnectionTally) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the timers and caps of ``tally.limits`` (module docstring)."""
    limits = tally.limits

    class GuardedH11Protocol(H11Protocol):
        _client_key: str | None = None
        _timer: asyncio.TimerHandle | None = None
        _timer_kind = ""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            key = self.client[0] if self.client else ""
            refused = tally.admit(key)
            if refused is not None:
                tally.count_shed(refused)
                transport.write(_BUSY)
                transport.close()
                return
            self._client_key = key
            self._arm(limits.header_seconds, self._headers_late, "headers")

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._client_key is not None:
                tally.release(self._client_key)
                self._client_key = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._rearm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._rearm()

        def _rearm(self) -> None:
            """The timer that fits what the client owes now: headers, body bytes, or nothing."""
            if self.transport.is_closing():
                return
            state: Any = self.conn.their_state
            if state is _IDLE and self.timeout_keep_alive_task is None:
                if self._timer is None or self._timer_kind != "headers":
                    self._arm(limits.header_seconds, self._headers_late, "headers")
            elif state is _SEND_BODY:
                self._arm(limits.body_seconds, self._body_late, "body")  # from the latest byte
            else:
                self._disarm()

        def _arm(self, seconds: float, callback: Any, kind: str = "headers") -> None:
            self._disarm()
            self._timer = self.loop.call_later(seconds, callback)
            self._timer_kind = kind

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_kind = ""

        def _headers_late(self) -> None:
            self._timer = None
            if self.transport.is_closing() or self.conn.their_state is not _IDLE:
                return
            tally.count_shed("header_timeout")
            self.transport.write(_SLOW)
            self.transport.close()

        def _body_late(self) -> None:
            self._timer = None
            if self.transport.is_closing() or self.conn.their_state is not _SEND_BODY:
                return
            if self.flow is not None and self.flow.read_paused:  # the server is not reading
                self._arm(limits.body_seconds, self._body_late, "body")
                return
            tally.count_shed("body_timeout")
            self.transport.close()

    return GuardedH11Protocol


def _h11_states() -> tuple[Any, Any]:
    import h11

    return h11.IDLE, h11.SEND_BODY


_IDLE, _SEND_BODY = _h11_states()
