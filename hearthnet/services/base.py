"""The shape every service has: registrations, start, stop, health; and the start and stop of the
model-backed ones (embeddings, chat, rerank), each serving a list of backends of one model each."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import structlog

from hearthnet.bus.descriptors import CapabilityDescriptor, Handler, ParamsPredicate, Registration
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


B = TypeVar("B", bound=ModelBackend)


@dataclass(frozen=True)
class PlannedBackend(Generic[B]):
    """A backend the config asks for: its model name, how to build it, and the errors that mean
    "not here" (a missing model file, an unset API key) rather than a bug."""

    model: str
    build: Callable[[], Awaitable[B]]
    unavailable_on: tuple[type[Exception], ...] = (BadRequest,)


class ModelService(ABC, Generic[B]):
    """The start, registrations, health and stop every model-backed service shares (embeddings,
    chat, rerank): backends given by the caller plus those the config plans, each model offered
    once; a planned backend that cannot be built is left out with its reason (``unavailable``)."""

    name: str
    what: ClassVar[str]
    """How logs and refusals name the backends: "embedding backends"."""
    predicate: ClassVar[ParamsPredicate]
    """Which calls' params a backend takes (the contract's: its exact model name)."""

    def __init__(self, backends: Sequence[B] = ()) -> None:
        """``backends`` are used as given (tests, custom backends); the config plans more at ``start``."""
        self._given = list(backends)
        self._backends: list[B] = []
        self._unavailable: dict[str, str] = {}

    @property
    def backends(self) -> list[B]:
        return list(self._backends)

    @property
    def unavailable(self) -> dict[str, str]:
        """Model name -> why it is not served and how to fix it."""
        return dict(self._unavailable)

    def planned(self) -> list[PlannedBackend[B]]:
        """The backends the config asks for, built at ``start``."""
        return []

    @abstractmethod
    def descriptor(self, backend: B) -> CapabilityDescriptor:
        """The capability ``backend`` is registered as."""

    @abstractmethod
    def handler(self, backend: B) -> Handler:
        """What answers the calls ``backend`` takes."""

    def describe(self, backend: B) -> dict[str, Any]:
        """One model's line in ``health``."""
        return {"model": backend.model}

    async def start(self) -> None:
        backends = list(self._given)
        for plan in self.planned():
            try:
                backends.append(await plan.build())
            except plan.unavailable_on as exc:
                reason = str(getattr(exc, "message", exc))
                self._unavailable[plan.model] = reason
                log.warning("backend not offered", what=self.what, model=plan.model, reason=reason)
        await check_unique_models(backends, self.what)
        self._backends = backends

    def registrations(self) -> list[Registration]:
        predicate = type(self).predicate  # read off the class: a plain function, not a bound method
        return [
            Registration(descriptor=self.descriptor(b), handler=self.handler(b), predicate=predicate)
            for b in self._backends
        ]

    async def stop(self) -> None:
        backends, self._backends = self._backends, []
        await close_backends(backends, self.what)

    def health(self) -> dict[str, Any]:
        return {
            "ok": bool(self._backends),
            "models": [self.describe(b) for b in self._backends],
            "unavailable": dict(self._unavailable),
        }
