"""``/files/<cid>``: a document's bytes, for the browser's own viewer (a PDF opens at ``#page=N``).

A blob this node lacks is first fetched from a member that holds it (``file.fetch``: every chunk
verified, the whole document checked against its CID), then streamed from the local store
through ``file.read``.  Private blobs (the personal corpus) never leave their node, since
``file.read`` refuses them to peers, and here only the node's owner may open them.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from hearthnet.blobs.cid import is_cid
from hearthnet.community.levels import Level
from hearthnet.contracts import formats
from hearthnet.contracts.file import FileClient
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.frontends.http.app import UiState, api
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.http.responses import error_response
from hearthnet.frontends.http.tokens import Session

__all__ = ["routes"]

FETCH_TIMEOUT = 300.0


async def _local_entry(state: UiState, session: Session, cid: str) -> dict[str, Any] | None:
    listing = await FileClient(state.bus.login(session.level)).list(prefix=cid)
    return next((b for b in listing.get("blobs", []) if b.get("doc_cid") == cid), None)


async def _file(state: UiState, request: Request, session: Session) -> Response:
    cid = request.path_params["cid"]
    if not is_cid(cid):
        raise BadRequest("not a document id (blake3:<hex>)")
    entry = await _local_entry(state, session, cid)
    if entry is not None and entry.get("private") and not session.owner:
        raise NotFound(f"this node does not hold {cid}")  # the owner's personal document
    if entry is None or not entry.get("complete"):
        hint = request.query_params.get("node") or None
        await FileClient(state.bus.login(session.level)).fetch(cid, hint=hint, timeout=FETCH_TIMEOUT)
    return BlobResponse(state.bus, session.level, cid)


class BlobResponse(Response):
    """Streams a local blob through ``file.read``; the headers go out with its first chunk, once
    its type is known (``%PDF-``: ``application/pdf``, shown inline by the browser)."""

    def __init__(self, bus: GatedBus, level: Level, cid: str) -> None:
        # No Response.__init__: the length and type are known only from the blob itself.
        self.status_code = 200
        self.background = None
        self.raw_headers = []
        self._bus = bus
        self._level = level
        self._cid = cid

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        async with anyio.create_task_group() as tg:

            async def until_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_gone)
            try:
                started = await self._send(send)
            except BusError as exc:
                if started:
                    raise  # the body is cut short: the browser sees an incomplete download
                await error_response(exc)(scope, receive, send)
            tg.cancel_scope.cancel()

    async def _send(self, send: Send) -> bool:
        size = 0
        started = False
        files = FileClient(self._bus.login(self._level))
        async with files.reading(self._cid, provider=self._bus.node_id) as call:
            async for frame in call.frames():
                manifest = frame.get("manifest")
                if isinstance(manifest, dict):
                    size = int(manifest.get("size") or 0)
                    continue
                data = frame.get("data")
                if not isinstance(data, bytes):
                    continue
                if not started:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": _headers(self._cid, data, size),
                        }
                    )
                    started = True
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await call.result()
        if not started:  # an empty blob
            await send({"type": "http.response.start", "status": 200, "headers": _headers(self._cid, b"", 0)})
            started = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return started


def _headers(cid: str, first: bytes, size: int) -> list[tuple[bytes, bytes]]:
    """The content type of the registry's format the blob starts as (shown inline if a browser
    shows it; else downloaded: the UI opens such a document as ``/files/<cid>/view``)."""
    name = cid.split(":", 1)[1][:16]
    text = formats.TEXT
    fmt = next((f for f in formats.FORMATS if f.magic is not None and first.startswith(f.magic)), None)
    if fmt is not None:
        how = "inline" if fmt.inline else "attachment"
        kind, disposition = fmt.content_type.encode(), f'{how}; filename="{name}{fmt.suffixes[0]}"'
    elif _is_text(first):
        kind = f"{text.content_type}; charset=utf-8".encode()
        disposition = f'inline; filename="{name}{text.suffixes[0]}"'
    else:
        kind, disposition = b"application/octet-stream", f'attachment; filename="{name}"'
    return [
        (b"content-type", kind),
        (b"content-length", str(size).encode()),
        (b"content-disposition", disposition.encode()),
        (b"cache-control", b"private, max-age=3600"),
    ]


def _is_text(data: bytes) -> bool:
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= 4090  # a character cut at the end of the sample
    return b"\x00" not in data[:4096]


def routes(state: UiState) -> list[BaseRoute]:
    return [Route("/files/{cid}", api(state, _file))]
