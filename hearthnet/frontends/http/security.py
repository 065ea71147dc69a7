"""The guard in front of every route: Host check, sign-in, CSRF and Origin, security headers.

A pure ASGI middleware (no per-request task or body buffering), so server-sent events and
uploads stream through it.  In order:

1. **Host**: the address the UI listens on, ``localhost``, ``127.0.0.1``, ``[::1]``, a name of
   ``[ui] allowed_hosts`` (or, listening on every interface, any IP address), on the UI's
   port; anything else (a DNS-rebinding page names its own host) is ``421``.
2. **Sign-in**: the session cookie names a live session; without one every path but the
   sign-in page, its API and the static files is ``401`` (the sign-in page for a page, JSON
   for the API, SSE included).
3. **State-changing requests** (anything but GET/HEAD): an ``Origin`` (or ``Sec-Fetch-Site``)
   that is not this UI's is ``403``; then, but for signing in, the session's CSRF token must
   be in ``X-CSRF-Token``, else ``403``.
4. Every answer carries the Content-Security-Policy (no inline script), ``nosniff``, no
   referrer, no framing, and ``Cache-Control: no-store`` unless the route set its own.

The programs' routes (``/v1/*``, ``/mcp``) pass the Host check, then go to their own door
(``bearer.BearerDoor``): an API key, never the session cookie, lets a request in there.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Callable, Iterable
from typing import Any

from hearthnet.frontends.http.asgi import (
    ASGIApp,
    HttpMiddleware,
    Message,
    Receive,
    Scope,
    Send,
    request_headers,
)
from hearthnet.frontends.http.bearer import is_bearer_path
from hearthnet.frontends.http.sessions import SessionCache

__all__ = ["COOKIE", "CSP", "Guard"]


COOKIE = "hn_session"
CSRF_HEADER = "x-csrf-token"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SAFE_METHODS = frozenset({"GET", "HEAD"})
PUBLIC_PATHS = frozenset({"/login", "/api/login", "/api/login/preview", "/favicon.ico"})
PUBLIC_PREFIXES = ("/static/",)

_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_names(listen_host: str, extra: Iterable[str]) -> tuple[frozenset[str], bool]:
    """The host names requests may give, and whether any IP address will do (a wildcard listen)."""
    wildcard = listen_host in ("0.0.0.0", "::", "")
    names = LOOPBACK_NAMES | {listen_host.lower()} | {h.lower() for h in extra}
    return frozenset(names), wildcard


def host_allowed(host: str, port: int, names: Iterable[str], *, any_ip: bool = False) -> bool:
    """``host`` (a Host header) names this UI: one of ``names`` (or, with ``any_ip``, any IP
    address), on ``port``."""
    if host.startswith("["):  # [IPv6]:port
        end = host.find("]")
        name, rest = host[1:end], host[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("80" if not rest else "")
        if end < 0:
            return False
    else:
        name, sep, port_text = host.partition(":")
        if not sep:
            port_text = "80"
    if not port_text.isdigit() or int(port_text) != port:
        return False
    name = name.lower()
    if name in names:
        return True
    if not any_ip:
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def cookie_value(header: str, name: str = COOKIE) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return value
    return None


class Guard(HttpMiddleware):
    def __init__(
        self,
        app: ASGIApp,
        *,
        sessions: SessionCache,
        port: Callable[[], int],
        listen_host: str = "127.0.0.1",
        allowed_hosts: Iterable[str] = (),
        login_page: Callable[[], bytes],
        programs: ASGIApp | None = None,
    ) -> None:
        super().__init__(app)
        self._programs = programs
        self._sessions = sessions
        self._port = port
        self._names, self._any_ip = allowed_names(listen_host, allowed_hosts)
        self._login_page = login_page

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        host = headers.get(b"host", b"").decode("latin-1")

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = list(message.get("headers", []))
                names = {k.lower() for k, _ in out}
                out.extend(h for h in _HEADERS if h[0] not in names)
                if b"cache-control" not in names:
                    out.append((b"cache-control", b"no-store"))
                message["headers"] = out
            await send(message)

        if not host_allowed(host, self._port(), self._names, any_ip=self._any_ip):
            await _plain(send_secured, 421, "this address is not the node's web UI (check the Host)")
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if self._programs is not None and is_bearer_path(path):
            await self._programs(scope, receive, send_secured)
            return
        session = await self._sessions.lookup(cookie_value(headers.get(b"cookie", b"").decode("latin-1")))
        scope["hn.session"] = session
        public = path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)
        if method not in SAFE_METHODS:
            problem = _cross_origin(headers, host)
            # Signing in needs no CSRF token (there is no session yet, or it is being replaced)
            if problem is None and session is not None and not public:
                sent = headers.get(CSRF_HEADER.encode(), b"").decode("latin-1")
                if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
                    problem = "the CSRF token is missing or wrong: reload the page"
            if problem is not None:
                await _json(send_secured, 403, {"error": "unauthorized", "message": problem})
                return
        if session is None and not public:
            if path.startswith(("/api/", "/files/")) or method not in SAFE_METHODS:
                await _json(send_secured, 401, {"error": "unauthorized", "message": "sign in first"})
            else:
                await _respond(send_secured, 401, self._login_page(), b"text/html; charset=utf-8")
            return
        await self.app(scope, receive, send_secured)


def _cross_origin(headers: dict[bytes, bytes], host: str) -> str | None:
    """Why a state-changing request is not from this UI's own pages, or ``None``."""
    origin = headers.get(b"origin")
    if origin is not None and origin.decode("latin-1") != f"http://{host}":
        return "cross-origin request refused"
    site = headers.get(b"sec-fetch-site")
    if site is not None and site not in (b"same-origin", b"none"):
        return "cross-site request refused"
    return None


async def _respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, document: dict[str, Any]) -> None:
    await _respond(send, status, json.dumps(document).encode(), b"application/json")


async def _plain(send: Send, status: int, text: str) -> None:
    await _respond(send, status, text.encode(), b"text/plain; charset=utf-8")
