"""Rerank settings: ``[rerank]`` and its ``[[rerank.servers]]`` tables, and ``HEARTHNET_RERANK_*``.

One :class:`RerankServerConfig` per cross-encoder server, named by the protocol it
speaks: ``tei`` (Text Embeddings Inference's ``POST /rerank``) or ``cohere``
(the ``POST /v1/rerank`` of Cohere, Jina, vLLM, llama.cpp's server).  Every table
is strict (an unknown key or a wrong TOML type is ``bad_request`` naming it).
Pure functions, no I/O.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from hearthnet.config.values import (
    api_key,
    check_unique_models,
    configured_or_new,
    described_server,
    env_int,
    switched,
    with_entry,
)
from hearthnet.errors import BadRequest

__all__ = [
    "PROTOCOLS",
    "RERANK_ENV",
    "RerankConfig",
    "RerankServerConfig",
    "rerank_config",
    "rerank_from_env",
]

PROTOCOLS = ("tei", "cohere")
MAX_SERVERS = 16
MAX_TEXTS_PER_REQUEST = 256
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_TOP_KEYS = frozenset({"enabled", "servers"})
_SERVER_KEYS = frozenset(
    {"base_url", "model", "protocol", "api_key_env", "timeout_seconds", "max_concurrent", "max_texts"}
)


@dataclass(frozen=True)
class RerankServerConfig:
    """One reranking model on a server; checked on construction, errors name ``rerank.servers.KEY``.

    ``max_texts`` is the most texts one HTTP request carries (TEI refuses more than its
    ``--max-client-batch-size``, 32 by default): larger calls are split.  ``max_concurrent``
    bounds both the calls served at once and the requests in flight to the server.
    """

    base_url: str
    model: str
    protocol: str = "tei"
    api_key_env: str | None = None
    timeout_seconds: float = 30.0
    max_concurrent: int = 4
    max_texts: int = 32

    def __post_init__(self) -> None:
        where = "rerank.servers"
        try:
            parts = urlsplit(self.base_url)
            _ = parts.port  # a port that is not a number below 65536 raises here
        except ValueError:
            raise BadRequest(f"{where}.base_url is not a valid URL: {self.base_url!r:.200}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadRequest(
                f"{where}.base_url must be an http(s) URL with a host, got {self.base_url!r:.200}"
            )
        if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
            raise BadRequest(
                f"{where}.base_url must hold no credentials, query or fragment "
                "(put an API key in the variable api_key_env names)"
            )
        if not self.model.strip() or len(self.model) > 200 or not self.model.isprintable():
            raise BadRequest(f"{where}.model must be 1..200 printable characters")
        if self.protocol not in PROTOCOLS:
            raise BadRequest(f"{where}.protocol must be tei or cohere, got {self.protocol!r:.40}")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise BadRequest(
                f"{where}.api_key_env must be the name of an environment variable, "
                f"got {self.api_key_env!r:.60}"
            )
        if not (math.isfinite(self.timeout_seconds) and 0 < self.timeout_seconds <= 3600):
            raise BadRequest(
                f"{where}.timeout_seconds must be above 0 and at most 3600, got {self.timeout_seconds!r}"
            )
        if not 1 <= self.max_concurrent <= 1024:
            raise BadRequest(f"{where}.max_concurrent must be 1..1024, got {self.max_concurrent}")
        if not 1 <= self.max_texts <= MAX_TEXTS_PER_REQUEST:
            raise BadRequest(f"{where}.max_texts must be 1..{MAX_TEXTS_PER_REQUEST}, got {self.max_texts}")

    @property
    def endpoint(self) -> str:
        """``{base_url}/rerank`` (tei) or ``{base_url}/v1/rerank`` (cohere; a base ending in /v1 kept)."""
        base = self.base_url.rstrip("/")
        if self.protocol == "tei":
            return base + "/rerank"
        return (base if base.endswith("/v1") else base + "/v1") + "/rerank"

    def api_key(self, environ: Mapping[str, str] = os.environ) -> str | None:
        """The key from the variable ``api_key_env`` names; ``bad_request`` when it is not set."""
        return api_key(self.api_key_env, environ, f"rerank model {self.model!r:.80}")


@dataclass(frozen=True)
class RerankConfig:
    """``[rerank]``: whether the service runs, and its servers (model names unique)."""

    enabled: bool = True
    servers: tuple[RerankServerConfig, ...] = ()

    def __post_init__(self) -> None:
        check_unique_models([s.model for s in self.servers], "rerank servers")


def _strict(raw: Any, name: str, known: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise BadRequest(f"{name} in config.toml must be a table")
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise BadRequest(
            f"unknown config key(s) in {name}: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    return raw


def _value(
    table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str
) -> Any:
    """``table[key]`` or ``default``; another TOML type is ``bad_request`` (a bool is not a number)."""
    if key not in table:
        return default
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join(
            "true/false" if k is bool else "a number" if k is float else k.__name__ for k in kinds
        )
        raise BadRequest(f"{where}.{key} in config.toml must be {names}, got {value!r:.80}")
    return value


def rerank_config(table: Any) -> RerankConfig:
    """``[rerank]`` with its ``[[rerank.servers]]`` from parsed TOML (an absent table: ``{}``)."""
    top = _strict(table, "[rerank]", _TOP_KEYS)
    raw_servers = _value(top, "servers", list, [], "rerank")
    if len(raw_servers) > MAX_SERVERS:
        raise BadRequest(
            f"[[rerank.servers]] in config.toml has {len(raw_servers)} tables; at most {MAX_SERVERS}"
        )
    servers = []
    for i, raw in enumerate(raw_servers, start=1):
        t = _strict(raw, f"[[rerank.servers]] #{i}", _SERVER_KEYS)
        for required in ("base_url", "model"):
            if required not in t:
                raise BadRequest(f"[[rerank.servers]] #{i} in config.toml needs {required}")
        where = "rerank.servers"
        defaults = RerankServerConfig
        servers.append(
            RerankServerConfig(
                base_url=_value(t, "base_url", str, None, where),
                model=_value(t, "model", str, None, where),
                protocol=_value(t, "protocol", str, defaults.protocol, where),
                api_key_env=_value(t, "api_key_env", str, None, where),
                timeout_seconds=float(
                    _value(t, "timeout_seconds", (int, float), defaults.timeout_seconds, where)
                ),
                max_concurrent=_value(t, "max_concurrent", int, defaults.max_concurrent, where),
                max_texts=_value(t, "max_texts", int, defaults.max_texts, where),
            )
        )
    return RerankConfig(enabled=_value(top, "enabled", bool, True, "rerank"), servers=tuple(servers))


RERANK_ENV = (
    "HEARTHNET_RERANK_BASE_URL",
    "HEARTHNET_RERANK_MODEL",
    "HEARTHNET_RERANK_PROTOCOL",
    "HEARTHNET_RERANK_API_KEY_ENV",
    "HEARTHNET_RERANK_TIMEOUT_SECONDS",
    "HEARTHNET_RERANK_MAX_CONCURRENT",
    "HEARTHNET_RERANK_MAX_TEXTS",
)
"""One rerank server described by the environment (BASE_URL and MODEL required)."""


def _env_seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise BadRequest(f"{name} must be a number of seconds, got {text!r:.40}") from None


def rerank_from_env(config: RerankConfig, env: Mapping[str, str]) -> RerankConfig:
    """``HEARTHNET_RERANK`` (on/off) and one server from ``HEARTHNET_RERANK_*``.

    The server replaces a configured one of the same model (keeping that table's
    other settings) or is added.
    """
    config = switched(config, env, "HEARTHNET_RERANK")
    described = described_server(env, "HEARTHNET_RERANK", RERANK_ENV, "a rerank server")
    if described is None:
        return config
    base_url, model = described
    try:
        base = configured_or_new(
            config.servers, model, lambda: RerankServerConfig(base_url=base_url, model=model)
        )
        entry = replace(
            base,
            base_url=base_url,
            protocol=env.get("HEARTHNET_RERANK_PROTOCOL", base.protocol),
            api_key_env=env.get("HEARTHNET_RERANK_API_KEY_ENV") or base.api_key_env,
            timeout_seconds=_env_seconds(env, "HEARTHNET_RERANK_TIMEOUT_SECONDS", base.timeout_seconds),
            max_concurrent=env_int(env, "HEARTHNET_RERANK_MAX_CONCURRENT", base.max_concurrent, 1),
            max_texts=env_int(env, "HEARTHNET_RERANK_MAX_TEXTS", base.max_texts, 1),
        )
    except BadRequest as exc:
        key = re.match(r"rerank\.servers\.(\w+)", exc.message)
        variable = f"HEARTHNET_RERANK_{key.group(1).upper()}" if key else ""
        if variable in env:
            raise BadRequest(f"{variable}: {exc.message}") from None
        raise BadRequest(f"{exc.message} (from the HEARTHNET_RERANK_* variables)") from None
    return replace(config, servers=with_entry(config.servers, entry))
