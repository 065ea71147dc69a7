"""The web UI's ASGI application: pages, sign-in, the live stream, and the API of each page.

Every route runs behind :class:`~hearthnet.frontends.http.security.Guard`, so a handler
always has a signed-in session (``request.scope["hn.session"]``); each capability it calls
goes through :class:`~hearthnet.frontends.http.policy.GatedBus` with that session's level.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hearthnet.config import UiConfig
from hearthnet.contracts.node import NodeClient
from hearthnet.errors import BadRequest, BusError
from hearthnet.frontends.http import pages
from hearthnet.frontends.http.asgi import ASGIApp
from hearthnet.frontends.http.jobs import Jobs
from hearthnet.frontends.http.last_resort import LastResort, ui_door, ui_shape
from hearthnet.frontends.http.live import EventWatcher, LiveHub
from hearthnet.frontends.http.nodebook import NodeBook
from hearthnet.frontends.http.policy import CAPABILITY_LEVELS, GatedBus
from hearthnet.frontends.http.responses import Emit, EventStream, error_response, json_body, json_response
from hearthnet.frontends.http.security import COOKIE, Guard
from hearthnet.frontends.http.sessions import SessionCache
from hearthnet.frontends.http.tokens import SESSION_SECONDS, Session

__all__ = ["UiState", "api", "build_app", "session_of"]

STATIC = Path(__file__).resolve().parent / "static"
HEARTBEAT_SECONDS = 15.0


@dataclass
class UiState:
    """What every handler may use."""

    bus: GatedBus
    sessions: SessionCache
    hub: LiveHub
    watcher: EventWatcher
    jobs: Jobs
    nodes: NodeBook
    config: UiConfig
    node_name: str
    port: Callable[[], int]
    closing: anyio.Event = field(default_factory=anyio.Event)
    boot: str = field(default_factory=lambda: secrets.token_hex(8))
    """Changes at every start: a page that sees another one knows the node restarted."""


def session_of(request: Request) -> Session:
    session: Session | None = request.scope.get("hn.session")
    assert session is not None  # the guard answered 401 otherwise
    return session


Handler = Callable[[UiState, Request, Session], Awaitable[Response]]


def api(state: UiState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A route handler with its session, whose bus errors become JSON answers with their status."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(state, request, session_of(request))
        except BusError as exc:
            return error_response(exc)

    return endpoint


# -- pages -------------------------------------------------------------------------------
def _page(render: Callable[[Session, str], str]) -> Handler:
    async def handler(state: UiState, request: Request, session: Session) -> Response:
        return HTMLResponse(render(session, state.node_name))

    return handler


async def _home(state: UiState, request: Request, session: Session) -> Response:
    return RedirectResponse("/ask", status_code=303)


async def _login_page(request: Request) -> Response:
    return HTMLResponse(pages.login_page(navigation(request.headers, request.url.netloc)))


def navigation(headers: Mapping[str, str], host: str) -> str:
    """How the browser came to a page: ``none`` (typed, a bookmark, another program),
    ``same-origin`` (a page of this UI), ``cross-site`` or ``same-site`` (another site's page), or
    ``unknown`` (a browser that says neither ``Sec-Fetch-Site`` nor ``Referer``)."""
    site = headers.get("sec-fetch-site")
    if site in ("none", "same-origin", "same-site", "cross-site"):
        return site
    referer = headers.get("referer")
    if referer is None:
        return "unknown"
    return "same-origin" if referer.startswith((f"http://{host}/", f"https://{host}/")) else "cross-site"


# -- sign-in -------------------------------------------------------------------------------
LINK_REFUSED = (
    "this link is not valid: it was revoked, has expired, or was already used (a link from "
    "'hearthnet ui' works once)"
)


async def _login_token(request: Request) -> tuple[dict[str, Any], str] | Response:
    try:
        body = await json_body(request)
    except BusError as exc:
        return error_response(exc)
    token = body.get("token")
    if not isinstance(token, str) or not 0 < len(token) <= 256:
        return json_response({"error": "bad_request", "message": "no token in the link"}, 400)
    return body, token


def _preview(state: UiState) -> Callable[[Request], Awaitable[Response]]:
    """Who a sign-in link would make this browser, and who it is now; nothing is used or changed.
    The sign-in page asks before acting on a link when the browser is signed in already, or
    when another site sent it there (``specs/ui.md``)."""

    async def endpoint(request: Request) -> Response:
        given = await _login_token(request)
        if isinstance(given, Response):
            return given
        found = await state.sessions.preview(given[1])
        if found is None:
            return json_response({"error": "unauthorized", "message": LINK_REFUSED}, 401)
        current: Session | None = request.scope.get("hn.session")
        return json_response(
            {
                "link": {"name": found[0], "level": found[1].label},
                "current": None if current is None else {"name": current.name, "level": current.level.label},
            }
        )

    return endpoint


def _login(state: UiState) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        given = await _login_token(request)
        if isinstance(given, Response):
            return given
        body, token = given
        current: Session | None = request.scope.get("hn.session")
        if current is not None and body.get("replace") is not True:
            # A link never silently replaces a live session: the page asks first (login CSRF).
            return json_response(
                {
                    "error": "bad_request",
                    "message": f"this browser is signed in as {current.name} ({current.level.label}): "
                    "confirm on the sign-in page to switch",
                },
                409,
            )
        redeemed = await state.sessions.redeem(token)
        if redeemed is None:
            return json_response({"error": "unauthorized", "message": LINK_REFUSED}, 401)
        session, cookie = redeemed
        if current is not None:
            await state.sessions.end(current)
        response = json_response({"name": session.name, "level": session.level.label})
        response.set_cookie(
            COOKIE, cookie, max_age=SESSION_SECONDS, path="/", httponly=True, samesite="strict"
        )
        return response

    return endpoint


async def _logout(state: UiState, request: Request, session: Session) -> Response:
    await state.sessions.end(session)
    response = json_response({"ok": True})
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


async def _whoami(state: UiState, request: Request, session: Session) -> Response:
    return json_response(
        {
            "name": session.name,
            "level": session.level.label,
            "owner": session.owner,
            "revoked": session.revoked,
            "node_id": state.bus.node_id,
            "node_name": state.node_name,
            "boot": state.boot,
            "may": sorted(c for c, lvl in CAPABILITY_LEVELS.items() if session.level >= lvl),
        }
    )


async def _node(state: UiState, request: Request, session: Session) -> Response:
    """This node's ``node.info`` (one capability, one call: the benchmark's route too)."""
    return json_response(await NodeClient(state.bus.login(session.level)).info())


# -- the live stream ------------------------------------------------------------------------
async def _live(state: UiState, request: Request, session: Session) -> Response:
    async def produce(emit: Emit) -> None:
        await emit("hello", {"boot": state.boot, "node_id": state.bus.node_id})
        async with state.hub.subscribe(session.token_id) as messages:
            while True:
                with anyio.move_on_after(HEARTBEAT_SECONDS) as idle:
                    try:
                        message = await messages.receive()
                    except anyio.EndOfStream:
                        return  # dropped (too slow) or the node is stopping: the page reconnects
                if idle.cancelled_caught:
                    await emit("ping", {})
                else:
                    await emit(*message)

    return EventStream(produce, state.closing)


def build_app(state: UiState, routes: list[BaseRoute], programs: ASGIApp | None = None) -> Guard:
    """The application, ``routes`` (of the library, mesh and ask modules) included; ``programs``
    (the gateway and MCP behind their bearer door) serves ``/v1/*`` and ``/mcp``."""

    def page(render: Callable[[Session, str], str]) -> Callable[[Request], Awaitable[Response]]:
        return api(state, _page(render))

    core: list[BaseRoute] = [
        Route("/", api(state, _home)),
        Route("/ask", page(pages.ask_page)),
        Route("/library", page(pages.library_page)),
        Route("/mesh", page(pages.mesh_page)),
        Route("/login", _login_page),
        Route("/api/login", _login(state), methods=["POST"]),
        Route("/api/login/preview", _preview(state), methods=["POST"]),
        Route("/api/logout", api(state, _logout), methods=["POST"]),
        Route("/api/session", api(state, _whoami)),
        Route("/api/node", api(state, _node)),
        Route("/api/live", api(state, _live)),
        *routes,
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=core, middleware=[Middleware(LastResort, shape=ui_shape, door=ui_door)])
    login = pages.login_page("unknown").encode()
    return Guard(
        app,
        sessions=state.sessions,
        port=state.port,
        listen_host=state.config.listen_host,
        allowed_hosts=state.config.allowed_hosts,
        login_page=lambda: login,
        programs=programs,
    )


def check_text(value: Any, what: str, limit: int = 512) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise BadRequest(f"{what} must be text of 1..{limit} characters")
    return value
