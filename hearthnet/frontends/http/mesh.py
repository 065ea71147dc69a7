"""The Mesh page's API: members and their nodes, capabilities with their figures, recent events,
and the anchor's actions (invite, promote, demote, revoke)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hearthnet.contracts.node import NodeClient
from hearthnet.errors import BadRequest, BusError
from hearthnet.frontends.http.app import UiState, api
from hearthnet.frontends.http.responses import json_body, json_response
from hearthnet.frontends.http.tokens import Session

__all__ = ["routes"]

STATS_TIMEOUT = 3.0
"""Seconds each connected node has to answer ``node.stats``."""
LEVELS = ("member", "trusted", "anchor")


def _figures(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for ref, s in (stats.get("capabilities") or {}).items():
        if isinstance(s, dict):
            out[str(ref)] = {k: s.get(k) for k in ("calls", "errors", "p50_ms", "in_flight", "last_error")}
    return out


async def _mesh(state: UiState, request: Request, session: Session) -> Response:
    node_client = NodeClient(state.bus.login(session.level))
    status = await node_client.status()
    members = await node_client.members()
    own = str(status["node_id"])
    peers = {p["node_id"]: p for p in status.get("peers", [])}
    await state.nodes.saw({own: state.node_name, **{k: p.get("name") or "" for k, p in peers.items()}})
    stats: dict[str, dict[str, Any] | BusError] = {}

    async def ask(node: str) -> None:
        try:
            out = await node_client.stats(provider=node, timeout=STATS_TIMEOUT)
            stats[node] = out.output
        except BusError as exc:
            stats[node] = exc

    async with anyio.create_task_group() as tg:
        for node in [own, *peers]:
            tg.start_soon(ask, node)
    offered: dict[str, list[str]] = {}
    for c in status.get("capabilities", []):
        refs = offered.setdefault(str(c["node"]), [])
        if c["capability"] not in refs:
            refs.append(c["capability"])
    now = time.time()
    nodes = []
    for m in members.get("members", []):
        node_id = m["node_id"]
        peer = peers.get(node_id)
        online = node_id == own or peer is not None
        answer = stats.get(node_id)
        nodes.append(
            {
                "node_id": node_id,
                "name": state.node_name if node_id == own else state.nodes.name_of(node_id),
                "level": m["level"],
                "self": node_id == own,
                "online": online,
                "last_heard_s": 0.0 if node_id == own else (peer or {}).get("last_heard_s"),
                "last_seen": now if online else state.nodes.last_seen(node_id),
                "address": (peer or {}).get("address"),
                "capabilities": sorted(offered.get(node_id, [])),
                "stats": _figures(answer) if isinstance(answer, dict) else None,
                "stats_error": answer.to_wire() if isinstance(answer, BusError) else None,
            }
        )
    return json_response(
        {
            "community": {"id": members.get("community_id"), "name": members.get("name")},
            "founder": members.get("founder"),
            "self": own,
            "nodes": nodes,
            "revoked": [{"node_id": r, "name": state.nodes.name_of(r)} for r in members.get("revoked", [])],
        }
    )


async def _events(state: UiState, request: Request, session: Session) -> Response:
    return json_response({"events": await state.watcher.recent()})


def _target(body: dict[str, Any]) -> str:
    node_id = body.get("node_id")
    if not isinstance(node_id, str) or not node_id.startswith("ed25519:") or len(node_id) > 100:
        raise BadRequest("node_id must be a node id (ed25519:...)")
    return node_id


def _level(body: dict[str, Any], default: str) -> str:
    level = body.get("level", default)
    if level not in LEVELS:
        raise BadRequest("level must be member, trusted or anchor")
    return str(level)


def _action(act: Callable[[NodeClient, dict[str, Any]], Awaitable[dict[str, Any]]]) -> Any:
    async def handler(state: UiState, request: Request, session: Session) -> Response:
        body = await json_body(request)
        return json_response(await act(NodeClient(state.bus.login(session.level)), body))

    return handler


def routes(state: UiState) -> list[BaseRoute]:
    def r(path: str, handler: Callable[..., Awaitable[Response]], methods: list[str] | None = None) -> Route:
        return Route(path, api(state, handler), methods=methods or ["GET"])

    def reason(body: dict[str, Any]) -> str:
        text = body.get("reason", "")
        if not isinstance(text, str) or len(text) > 200:
            raise BadRequest("reason must be text of at most 200 characters")
        return text

    return [
        r("/api/mesh", _mesh),
        r("/api/events", _events),
        r(
            "/api/mesh/invite",
            _action(lambda n, b: n.invite(_target(b), _level(b, "member"))),
            ["POST"],
        ),
        r(
            "/api/mesh/promote",
            _action(lambda n, b: n.promote(_target(b), _level(b, "trusted"))),
            ["POST"],
        ),
        r(
            "/api/mesh/demote",
            _action(lambda n, b: n.demote(_target(b), _level(b, "member"))),
            ["POST"],
        ),
        r(
            "/api/mesh/revoke",
            _action(lambda n, b: n.revoke(_target(b), reason(b))),
            ["POST"],
        ),
    ]
