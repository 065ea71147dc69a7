"""``[ui]``: the web UI the node serves (``specs/ui.md``); ``HEARTHNET_UI`` and
``HEARTHNET_UI_LISTEN`` override it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hearthnet.config.values import get, integer, parse_listen, seconds, switched
from hearthnet.errors import BadRequest

__all__ = ["KEYS", "UI_DEFAULT_PORT", "UI_MAX_UPLOAD_BYTES", "UiConfig", "ui_env", "ui_from"]

KEYS = frozenset(
    {
        "enabled",
        "listen",
        "allowed_hosts",
        "max_upload_bytes",
        "api_requests_per_minute",
        "api_burst",
        "max_connections",
        "max_connections_per_client",
        "header_timeout_seconds",
        "body_timeout_seconds",
    }
)
UI_DEFAULT_PORT = 7780
UI_MAX_UPLOAD_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class UiConfig:
    """The web UI served by the node (``specs/ui.md``)."""

    enabled: bool = True
    listen_host: str = "127.0.0.1"
    listen_port: int = UI_DEFAULT_PORT
    listen_explicit: bool = False
    """``listen`` was given (file or environment): a taken port is an error, never the next one."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names, besides the listen address and loopback, that requests may name (DNS rebinding)."""
    max_upload_bytes: int = UI_MAX_UPLOAD_BYTES
    api_requests_per_minute: int = 600
    """Requests one API key may make to the gateway and MCP routes, on average (a token bucket)."""
    api_burst: int = 60
    """Requests one API key may make at once before the per-minute rate applies."""
    max_connections: int = 1024
    """Open HTTP connections at most (in all; never more than half the node's descriptor limit)."""
    max_connections_per_client: int = 128
    """Open HTTP connections at most from one client address."""
    header_timeout_seconds: float = 10.0
    """A request's headers must be complete this long after its first byte."""
    body_timeout_seconds: float = 30.0
    """A request's body may pause this long between two bytes."""

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise BadRequest("ui.listen port must be 0..65535")
        if not 1 <= self.api_requests_per_minute <= 1_000_000 or not 1 <= self.api_burst <= 100_000:
            raise BadRequest("ui.api_requests_per_minute must be 1..1000000 and ui.api_burst 1..100000")
        if not 1 <= self.max_connections_per_client <= self.max_connections <= 1_000_000:
            raise BadRequest(
                "ui.max_connections_per_client must be 1..ui.max_connections, and ui.max_connections "
                "at most 1000000"
            )
        for key in ("header_timeout_seconds", "body_timeout_seconds"):
            value = getattr(self, key)
            if not 0.1 <= value <= 3600:
                raise BadRequest(f"ui.{key} must be 0.1..3600 seconds, got {value}")


def ui_from(ui_s: Mapping[str, Any]) -> UiConfig:
    listen = get(ui_s, "listen", str, None, "ui")
    host, port = (
        parse_listen(listen, "ui.listen in config.toml")
        if listen is not None
        else ("127.0.0.1", UI_DEFAULT_PORT)
    )
    hosts = get(ui_s, "allowed_hosts", list, [], "ui")
    for h in hosts:
        if not isinstance(h, str) or not h.strip() or any(c in h for c in " /:@"):
            raise BadRequest(f"ui.allowed_hosts in config.toml must be host names, got {h!r}")
    return UiConfig(
        enabled=get(ui_s, "enabled", bool, True, "ui"),
        listen_host=host,
        listen_port=port,
        listen_explicit=listen is not None,
        allowed_hosts=tuple(h.strip().lower() for h in hosts),
        max_upload_bytes=integer(ui_s, "max_upload_bytes", UI_MAX_UPLOAD_BYTES, 1, "ui"),
        api_requests_per_minute=integer(ui_s, "api_requests_per_minute", 600, 1, "ui"),
        api_burst=integer(ui_s, "api_burst", 60, 1, "ui"),
        max_connections=integer(ui_s, "max_connections", 1024, 1, "ui"),
        max_connections_per_client=integer(ui_s, "max_connections_per_client", 128, 1, "ui"),
        header_timeout_seconds=seconds(ui_s, "header_timeout_seconds", 10.0, "ui"),
        body_timeout_seconds=seconds(ui_s, "body_timeout_seconds", 30.0, "ui"),
    )


def ui_env(ui: UiConfig, env: Mapping[str, str]) -> UiConfig:
    """``HEARTHNET_UI`` and ``HEARTHNET_UI_LISTEN``."""
    ui = switched(ui, env, "HEARTHNET_UI")
    if "HEARTHNET_UI_LISTEN" in env:
        host, port = parse_listen(env["HEARTHNET_UI_LISTEN"], "HEARTHNET_UI_LISTEN")
        ui = replace(ui, listen_host=host, listen_port=port, listen_explicit=True)
    return ui
