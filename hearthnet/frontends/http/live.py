"""What open pages learn without a reload: upload progress and the community's events.

:class:`LiveHub` fans messages out to the server-sent-event streams of open pages (each with
a bounded queue: a page that stops reading is dropped and reconnects).  :class:`EventWatcher`
follows the node's event log through ``events.list`` while a page listens, keeps the recent
ones for the Mesh page, and publishes each new one (ingests, deletes, joins, promotions ...).
"""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hearthnet.community.levels import Level
from hearthnet.contracts.node import NodeClient
from hearthnet.errors import BusError
from hearthnet.frontends.http.policy import GatedBus

__all__ = ["EventWatcher", "LiveHub", "sse"]

log = structlog.get_logger("hearthnet.ui")

QUEUE = 256
"""Messages waiting for one page; beyond that the page is dropped (it reconnects and reloads)."""
RECENT = 200
"""Events the Mesh page can show."""
POLL_SECONDS = 1.0
RESCAN_SECONDS = 15.0
"""How often the whole log is read again, for events gossip delivered out of replay order."""
PAGE = 1000

Message = tuple[str, Any]
"""An event's kind and its data (JSON)."""


def sse(kind: str, data: Any) -> bytes:
    """One server-sent event (the data is JSON on one line)."""
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class LiveHub:
    def __init__(self) -> None:
        self._subscribers: dict[int, tuple[str | None, MemoryObjectSendStream[Message]]] = {}
        self._ids = itertools.count()
        self.listening = anyio.Event()
        """Set while at least one page listens (the event watcher works only then)."""

    @asynccontextmanager
    async def subscribe(self, token_id: str) -> AsyncIterator[MemoryObjectReceiveStream[Message]]:
        send, receive = anyio.create_memory_object_stream[Message](QUEUE)
        key = next(self._ids)
        self._subscribers[key] = (token_id, send)
        self.listening.set()
        try:
            async with receive:
                yield receive
        finally:
            self._subscribers.pop(key, None)
            send.close()
            if not self._subscribers:
                self.listening = anyio.Event()

    def publish(self, kind: str, data: Any, *, token_id: str | None = None) -> None:
        """Queue a message for every page (or only the pages of one login token)."""
        message = (kind, data)
        for key, (owner, send) in list(self._subscribers.items()):
            if token_id is not None and owner != token_id:
                continue
            try:
                send.send_nowait(message)
            except anyio.WouldBlock:
                send.close()  # the page's stream ends; it reconnects and reads everything again
                self._subscribers.pop(key, None)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.pop(key, None)

    def close_all(self) -> None:
        for _, send in self._subscribers.values():
            send.close()
        self._subscribers.clear()


def feed_item(event: dict[str, Any]) -> dict[str, Any]:
    """The parts of a log event a page shows (all of it is text from peers: the page escapes it)."""
    raw = event.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    keep = {
        k: data[k] for k in ("corpus", "doc_cid", "title", "node_id", "level", "name", "reason") if k in data
    }
    return {
        "event_id": event.get("event_id"),
        "type": event.get("event_type"),
        "author": event.get("author"),
        "lamport": event.get("lamport"),
        "wall_clock": event.get("wall_clock"),
        "effective": event.get("effective", True),
        "data": keep,
    }


class EventWatcher:
    """Follows the event log through ``events.list`` (the bus, like every front door)."""

    def __init__(self, bus: GatedBus, hub: LiveHub) -> None:
        self._bus = bus
        self._hub = hub
        self._seen: set[str] = set()
        self._cursor: Any = None
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self._lock = anyio.Lock()
        self._scanned = False
        self._last_full = 0.0

    async def recent(self) -> list[dict[str, Any]]:
        """The latest events, newest first."""
        await self.catch_up()
        return sorted(
            self._recent, key=lambda e: (e.get("lamport") or 0, e.get("event_id") or ""), reverse=True
        )

    async def catch_up(self) -> None:
        async with self._lock:
            full = not self._scanned or time.monotonic() - self._last_full >= RESCAN_SECONDS
            await self._read(full=full, publish=self._scanned)
            self._scanned = True

    async def _read(self, *, full: bool, publish: bool) -> None:
        after = None if full else self._cursor
        if full:
            self._last_full = time.monotonic()
        while True:
            page = await NodeClient(self._bus.login(Level.MEMBER)).events(limit=PAGE, after=after)
            events = page.get("events") or []
            for event in events:
                event_id = event.get("event_id")
                if not isinstance(event_id, str) or event_id in self._seen:
                    continue
                self._seen.add(event_id)
                item = feed_item(event)
                self._recent.append(item)
                if publish:
                    self._hub.publish("event", item)
            if events:
                last = events[-1]
                key = {"lamport": last.get("lamport"), "event_id": last.get("event_id")}
                if self._cursor is None or (key["lamport"], key["event_id"]) > (
                    self._cursor["lamport"],
                    self._cursor["event_id"],
                ):
                    self._cursor = key
            after = page.get("next")
            if after is None or not events:
                return

    async def run(self) -> None:
        """While a page listens, look for new events every ``POLL_SECONDS``."""
        while True:
            await self._hub.listening.wait()
            try:
                await self.catch_up()
            except BusError as exc:
                log.info("ui_events_failed", code=exc.code)
            await anyio.sleep(POLL_SECONDS)
