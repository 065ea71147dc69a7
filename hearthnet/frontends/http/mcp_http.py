"""The MCP server over streamable HTTP at ``/mcp``, behind the bearer door like the gateway.

Stateless (each POST carries its own JSON-RPC request and gets a JSON answer): nothing is kept
between requests, so a revoked key is refused at its very next request and no session can be
taken over.  Tool calls run as the request's API key (``scope["hn.caller"]``) with its level.
The SDK's session manager runs in the UI server's task group (``run()``).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
from mcp.server import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from hearthnet.errors import Unauthorized
from hearthnet.frontends.client.corpora import Calls
from hearthnet.frontends.http.bearer import BODY_LIMITS, Caller, GatedCalls, send_error
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.mcp.server import build_server

__all__ = ["McpEndpoint"]

PATH = "/mcp"


class McpEndpoint:
    """The ``/mcp`` route's ASGI application."""

    def __init__(self, bus: GatedBus) -> None:
        self._bus = bus
        self._serving = False
        self.server = build_server(self._calls_of)
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=True,
            max_request_body_size=BODY_LIMITS[PATH],
            security_settings=None,  # the guard checks the Host; the bearer door the key
        )

    def _calls_of(self, ctx: ServerRequestContext[Any, Any]) -> Calls:
        request = ctx.request
        caller = request.scope.get("hn.caller") if request is not None else None
        if not isinstance(caller, Caller):
            raise Unauthorized("no API key")  # unreachable behind the bearer door
        return GatedCalls(self._bus, caller)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The session manager's life (its task group), until cancelled with the server's."""
        async with self.manager.run():
            self._serving = True
            try:
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._serving = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._serving:  # the node is stopping
            await send_error(send, 503, "the node is stopping", "partition")
            return
        await self.manager.handle_request(scope, receive, send)

    def routes(self) -> list[BaseRoute]:
        return [Route(PATH, endpoint=self, methods=["GET", "POST", "DELETE"])]
