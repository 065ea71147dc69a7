"""A failure no route caught is answered in its door's shape (``frontends/http/last_resort.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from structlog.testing import capture_logs

from hearthnet.errors import Timeout
from hearthnet.frontends.http.last_resort import (
    LastResort,
    Shape,
    programs_door,
    programs_shape,
    ui_door,
    ui_shape,
)


async def _crash(request: Request) -> Response:
    raise RuntimeError("secret detail /home/owner/file.pdf")


async def _forgot(request: Request) -> Response:
    raise Timeout("the model took too long")


def _app(shape: Shape, door: Callable[[str], str]) -> Starlette:
    """As each door builds its application: the last resort inside Starlette's error middleware."""
    routes = [Route(p, _crash, methods=["GET", "POST"]) for p in ("/api/x", "/v1/embeddings", "/mcp")]
    return Starlette(
        routes=[*routes, Route("/api/late", _forgot)],
        middleware=[Middleware(LastResort, shape=shape, door=door)],
    )


async def _get(app: Starlette, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path)


@pytest.mark.parametrize("backend", ["asyncio"])
def test_each_door_answers_internal_error_in_its_shape_with_a_trace_id(backend: str) -> None:
    ui = _app(ui_shape, ui_door)
    programs = _app(programs_shape, programs_door)

    async def main() -> None:
        with capture_logs() as logs:
            page = await _get(ui, "/api/x")
            gateway = await _get(programs, "/v1/embeddings")
            mcp = await _get(programs, "/mcp")
            late = await _get(ui, "/api/late")
        assert page.status_code == 500 and page.json()["error"] == "internal_error"
        assert "trace_id=" in page.json()["message"] and "web UI" in page.json()["message"]
        error = gateway.json()["error"]
        assert gateway.status_code == 500 and error["type"] == "server_error"
        assert error["code"] == "internal_error"
        doc = mcp.json()
        assert doc["jsonrpc"] == "2.0" and doc["error"]["code"] == -32603
        assert "MCP server" in doc["error"]["message"]
        for r in (page, gateway, mcp):
            assert "secret" not in r.text and "Traceback" not in r.text and "RuntimeError" not in r.text
        assert late.status_code == 504 and late.json()["error"] == "timeout"  # a BusError keeps its code
        failed = [e for e in logs if e["event"] == "http_failed"]
        assert len(failed) == 3 and all(e["error"] == "RuntimeError" for e in failed)
        trace = json.loads(page.text)["message"].split("trace_id=")[1].rstrip(")")
        assert trace in {e["trace_id"] for e in failed}

    anyio.run(main, backend=backend)
