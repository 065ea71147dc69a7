"""Capability descriptors, registrations and params predicates (names and versions: :mod:`.versions`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hearthnet.bus.context import CallContext
from hearthnet.bus.versions import (
    MAX_TIMEOUT_SECONDS,
    NAME_RE,
    Version,
    parse_capability_ref,
    parse_version,
    version_satisfies,
)
from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest

__all__ = [
    "CapabilityDescriptor",
    "Handler",
    "HandlerResult",
    "ParamsPredicate",
    "Registration",
    "Version",
    "any_params",
    "params_key_equals",
    "parse_capability_ref",
    "parse_version",
    "shared_keys_equal",
    "version_satisfies",
]

ParamsPredicate = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
"""``predicate(offered_params, requested_params) -> bool``."""

HandlerResult = dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]
Handler = Callable[[CallContext], Awaitable[HandlerResult]]
"""A handler returns ``output`` or ``(output, meta)``."""


def any_params(offered: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """The default predicate: every provider of the name serves any params."""
    return True


def shared_keys_equal(offered: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
    """The default predicate for a remote provider: every requested key offered with the same value."""
    return all(key in offered and offered[key] == value for key, value in requested.items())


def params_key_equals(key: str) -> ParamsPredicate:
    """A predicate matching when ``requested[key]`` is absent or equals ``offered[key]``."""

    def predicate(offered: Mapping[str, Any], requested: Mapping[str, Any]) -> bool:
        return key not in requested or requested[key] == offered.get(key)

    predicate.__name__ = f"params_key_equals_{key}"
    return predicate


@dataclass(frozen=True)
class CapabilityDescriptor:
    """What a provider offers; travels in signed manifests (``to_wire``)."""

    name: str
    version: Version = (1, 0)
    params: Mapping[str, Any] = field(default_factory=dict)
    trust_required: Level = Level.MEMBER
    max_concurrent: int = 8
    timeout_seconds: float = 10.0
    idempotent: bool = False
    streaming: bool = False
    local_only: bool = False
    """Never advertised to peers and refused for remote callers (e.g. the ``personal`` corpus)."""
    description: str = ""

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise BadRequest(f"not a capability name: {self.name!r}")
        if self.max_concurrent < 1:
            raise BadRequest("max_concurrent must be at least 1")
        if not 0 < self.timeout_seconds <= MAX_TIMEOUT_SECONDS:  # also false for nan
            raise BadRequest(f"timeout_seconds must be in (0, {MAX_TIMEOUT_SECONDS:g}]")

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version[0]}.{self.version[1]}"

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": f"{self.version[0]}.{self.version[1]}",
            "params": dict(self.params),
            "trust_required": self.trust_required.label,
            "max_concurrent": self.max_concurrent,
            "timeout_seconds": self.timeout_seconds,
            "idempotent": self.idempotent,
            "streaming": self.streaming,
            "description": self.description,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CapabilityDescriptor:
        try:
            params = data.get("params") or {}
            if not isinstance(params, dict):
                raise BadRequest("descriptor params must be a map")
            return cls(
                name=str(data["name"]),
                version=parse_version(str(data["version"])),
                params=params,
                trust_required=Level.parse(str(data.get("trust_required", "member"))),
                max_concurrent=int(data.get("max_concurrent", 8)),
                timeout_seconds=float(data.get("timeout_seconds", 10.0)),
                idempotent=_flag(data, "idempotent"),
                streaming=_flag(data, "streaming"),
                description=str(data.get("description", "")),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise BadRequest(f"malformed capability descriptor: {type(exc).__name__}") from exc


def _flag(data: Mapping[str, Any], key: str) -> bool:
    """A boolean field of a peer's descriptor: a real bool (``bool("false")`` would be true)."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise BadRequest(f"malformed capability descriptor: {key} must be true or false")
    return value


@dataclass(frozen=True)
class Registration:
    """A local capability: descriptor, handler and the params-compatibility predicate."""

    descriptor: CapabilityDescriptor
    handler: Handler
    predicate: ParamsPredicate = any_params
