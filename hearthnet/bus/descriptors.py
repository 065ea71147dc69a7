"""Capability descriptors and the ``X.Y`` compatibility rule."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest

if TYPE_CHECKING:
    from hearthnet.bus.context import CallContext

Version = tuple[int, int]
ParamsPredicate = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
"""``predicate(offered_params, requested_params) -> bool``."""

HandlerResult = dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]
Handler = Callable[["CallContext"], Awaitable[HandlerResult]]
"""A handler returns ``output`` or ``(output, meta)``."""

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def parse_capability_ref(ref: str) -> tuple[str, Version]:
    """``"rag.query@1.0"`` -> ``("rag.query", (1, 0))``; no version means ``1.0``."""
    name, _, ver = ref.partition("@")
    if not _NAME_RE.match(name):
        raise BadRequest(f"not a capability name: {name!r:.80}")
    return name, parse_version(ver) if ver else (1, 0)


_VERSION_PART = re.compile(r"[0-9]{1,6}")
_MAX_TIMEOUT_SECONDS = 24 * 3600.0


@functools.lru_cache(maxsize=256)
def parse_version(text: str) -> Version:
    """``"X.Y"`` -> ``(X, Y)`` in ASCII digits (cached: every request has one; a bad one raises each time)."""
    major, dot, minor = text.partition(".")
    if not (dot and _VERSION_PART.fullmatch(major) and _VERSION_PART.fullmatch(minor)):
        raise BadRequest(f"a version looks like X.Y, got {text!r:.20}")
    return int(major), int(minor)


def version_satisfies(offered: Version, wanted: Version) -> bool:
    """``name@A.B`` is satisfied by ``X.Y`` iff ``X == A`` and ``Y >= B``."""
    return offered[0] == wanted[0] and offered[1] >= wanted[1]


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
        if not _NAME_RE.match(self.name):
            raise BadRequest(f"not a capability name: {self.name!r}")
        if self.max_concurrent < 1:
            raise BadRequest("max_concurrent must be at least 1")
        if not 0 < self.timeout_seconds <= _MAX_TIMEOUT_SECONDS:  # also false for nan
            raise BadRequest(f"timeout_seconds must be in (0, {_MAX_TIMEOUT_SECONDS:g}]")

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
