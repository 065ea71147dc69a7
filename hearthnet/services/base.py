"""The shape every service has: registrations, start, stop, health; and the start and stop of the
model-backed ones (embeddings, chat, rerank), each serving a list of backends of one model each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from hearthnet.bus.descriptors import Registration
from hearthnet.errors import BadRequest, BusError

log = structlog.get_logger("hearthnet.services")


class Service(Protocol):
    """A service offers capabilities on the bus; it never imports another service."""

    name: str

    def registrations(self) -> list[Registration]:
        """Capabilities to register once ``start`` has returned."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> dict[str, Any]: ...


class ModelBackend(Protocol):
    """One model a service serves (an ONNX model, an OpenAI-compatible server, a local child)."""

    @property
    def model(self) -> str: ...

    async def aclose(self) -> None: ...


async def check_unique_models(backends: Sequence[ModelBackend], what: str) -> None:
    """``bad_request`` (every backend closed first) if two of ``backends`` serve one model name:
    a call names its model, so the second could never be told apart."""
    models = [b.model for b in backends]
    dupes = sorted({m for m in models if models.count(m) > 1})
    if dupes:
        await close_backends(backends, what)
        raise BadRequest(f"two {what} serve the same model name: {', '.join(dupes)}")


async def close_backends(backends: Sequence[ModelBackend], what: str) -> None:
    """Close each backend; one that fails to close is logged, the others are still closed."""
    for backend in backends:
        try:
            await backend.aclose()
        except (OSError, BusError) as exc:
            log.warning("backend close failed", what=what, model=backend.model, error=type(exc).__name__)
