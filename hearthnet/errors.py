"""The one error tree of HearthNet.

Every failure that can cross the bus is a :class:`BusError` subclass carrying a
wire ``code`` from the capability contract.  Errors travel as
``{"error": code, "message": str, "retry_after_ms"?: int}`` and are rebuilt into
the same class on the caller with :func:`error_from_wire`.

Tree::

    BusError                      (abstract root; code "internal_error")
    ├── BadRequest                bad_request
    │   └── ProtocolError         bad_request   (peer broke the wire protocol; link closes)
    ├── SchemaMismatch            schema_mismatch
    ├── Unauthorized              unauthorized
    ├── Revoked                   revoked
    ├── NotFound                  not_found
    ├── NotImplementedCapability  not_implemented
    ├── Timeout                   timeout
    ├── Partition                 partition
    ├── CapacityExceeded          capacity_exceeded
    │   └── DiskFull              capacity_exceeded  (its message starts "disk full")
    ├── RateLimited               rate_limited
    ├── InvalidSignature          invalid_signature
    ├── Expired                   expired
    └── InternalError             internal_error
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

__all__ = [
    "ERROR_CODES",
    "BadRequest",
    "BusError",
    "CapacityExceeded",
    "DiskFull",
    "Expired",
    "InternalError",
    "InvalidSignature",
    "NotFound",
    "NotImplementedCapability",
    "Partition",
    "ProtocolError",
    "RateLimited",
    "Revoked",
    "SchemaMismatch",
    "Timeout",
    "Unauthorized",
    "bus_error_in",
    "error_from_wire",
    "unwrap_group",
]


_MAX_WIRE_MESSAGE = 4096
"""An error's message is cut to this many characters on the wire (it must always fit a frame)."""


class BusError(Exception):
    """Root of every error that has a wire code."""

    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_ms = retry_after_ms

    def to_wire(self) -> dict[str, Any]:
        """The error as the contract's ``{error, message, retry_after_ms?}`` map."""
        message = (
            self.message
            if len(self.message) <= _MAX_WIRE_MESSAGE
            else self.message[:_MAX_WIRE_MESSAGE] + "..."
        )
        out: dict[str, Any] = {"error": self.code, "message": message}
        if self.retry_after_ms is not None:
            out["retry_after_ms"] = int(self.retry_after_ms)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class BadRequest(BusError):
    """The request is malformed or violates a documented limit."""

    code = "bad_request"


class ProtocolError(BadRequest):
    """A peer sent bytes that break the wire protocol; the link is closed."""


class SchemaMismatch(BusError):
    """No provider offers a compatible version of the capability."""

    code = "schema_mismatch"


class Unauthorized(BusError):
    """The caller's trust level is too low, or it is not a member at all."""

    code = "unauthorized"


class Revoked(BusError):
    """The caller's membership has been revoked.

    ``evidence`` is the signed revocation event (``{body, sig}``) when the refusing side
    shows it to the revoked node itself, in a refused handshake; it never crosses a call.
    """

    code = "revoked"

    def __init__(
        self,
        message: str,
        *,
        retry_after_ms: int | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, retry_after_ms=retry_after_ms)
        self.evidence = evidence


class NotFound(BusError):
    """No such capability, corpus, blob or model."""

    code = "not_found"


class NotImplementedCapability(BusError):
    """The capability exists in the contract but this node does not implement it."""

    code = "not_implemented"


class Timeout(BusError):
    """The deadline passed before the call completed."""

    code = "timeout"


class Partition(BusError):
    """The provider could not be reached (link lost, no provider connected)."""

    code = "partition"


class CapacityExceeded(BusError):
    """The provider is at ``max_concurrent`` or over a quota; retry later."""

    code = "capacity_exceeded"


class DiskFull(CapacityExceeded):
    """A write found the disk (or a quota) full: said so, never as an internal error.  Crosses the
    wire as ``capacity_exceeded``; made by :mod:`hearthnet.runtime.disk_full` at the storage
    boundaries."""


class RateLimited(BusError):
    """The caller sends too fast; retry after ``retry_after_ms``."""

    code = "rate_limited"


class InvalidSignature(BusError):
    """A signature did not verify."""

    code = "invalid_signature"


class Expired(BusError):
    """A signed object (manifest, token) is past its validity."""

    code = "expired"


class InternalError(BusError):
    """An unexpected failure; the message carries a trace id, never a Python repr."""

    code = "internal_error"


_BY_CODE: dict[str, type[BusError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        SchemaMismatch,
        Unauthorized,
        Revoked,
        NotFound,
        NotImplementedCapability,
        Timeout,
        Partition,
        CapacityExceeded,
        RateLimited,
        InvalidSignature,
        Expired,
        InternalError,
    )
}

ERROR_CODES: frozenset[str] = frozenset(_BY_CODE)


def error_from_wire(payload: dict[str, Any]) -> BusError:
    """Rebuild the error class named by ``payload['error']``.

    An unknown code (a newer peer) becomes :class:`InternalError` with the code
    kept in the message, so nothing is silently lost.
    """
    code = payload.get("error")
    message = payload.get("message")
    if not isinstance(message, str):
        message = ""
    retry = payload.get("retry_after_ms")
    retry_after_ms = int(retry) if isinstance(retry, int) and not isinstance(retry, bool) else None
    cls = _BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        return InternalError(f"unknown error code {code!r}: {message}", retry_after_ms=retry_after_ms)
    return cls(message, retry_after_ms=retry_after_ms)


_CONSEQUENCES = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
"""What a task's partner sees when that task fails: its stream was closed or broke."""


def bus_error_in(exc: BaseException) -> BusError | None:
    """The ``BusError`` a task group's ``ExceptionGroup`` stands for, if that is all it holds.

    A handler that runs helpers in a task group gets its own ``BadRequest`` back
    wrapped in a group; the caller must still see ``bad_request``.  Only when
    every leaf is a ``BusError`` — or a closed or broken memory stream, which is
    how the helper's partner learns of the failure — is the first ``BusError``
    returned: a group that also holds a real bug stays an internal error.
    """
    if isinstance(exc, BusError):
        return exc
    if not isinstance(exc, BaseExceptionGroup):
        return None
    matched, rest = exc.split(BusError)
    if matched is None:
        return None
    if rest is not None:
        _, other = rest.split(_CONSEQUENCES)
        if other is not None:
            return None
    leaf: BaseException = matched
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf if isinstance(leaf, BusError) else None


def unwrap_group(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a task group's ``ExceptionGroup`` should be re-raised as.

    Its ``BusError`` if every leaf is one (see :func:`bus_error_in`), else its
    only leaf, else the group itself.
    """
    err = bus_error_in(group)
    if err is not None:
        return err
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group
