"""The serving side of the bus: a call from a peer (or from this node) resolved to a local
registration, checked against the caller's level, admitted within ``max_concurrent`` (else
``capacity_exceeded`` with a retry hint), run under its deadline, its answer checked before it
crosses the wire (a part of :class:`~hearthnet.bus.bus.CapabilityBus`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.call_origins import RemoteCallContext
from hearthnet.bus.context import CallContext, CallResult
from hearthnet.bus.descriptors import (
    CapabilityDescriptor,
    Registration,
    Version,
    parse_version,
)
from hearthnet.bus.flow import loop_time
from hearthnet.bus.registry import Registry, lookup_key, remember
from hearthnet.bus.router import Preference, Router
from hearthnet.bus.session import IncomingCall, PeerSession
from hearthnet.bus.stats import CapabilityStats, StatsBook
from hearthnet.bus.versions import version_text
from hearthnet.community.levels import Level
from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    InternalError,
    NotFound,
    ProtocolError,
    SchemaMismatch,
    Timeout,
    Unauthorized,
    bus_error_in,
)
from hearthnet.runtime.disk_full import disk_full, is_disk_full
from hearthnet.wire.codec import wire_shape_problem

log = structlog.get_logger("hearthnet.bus")

LevelOf = Callable[[str], Level | None]

UNRESOLVED = "(unresolved)"
"""``node.stats`` key of peers' calls refused before a capability was found (never the peer's own string)."""
_UNSET = object()


def _unsendable(ref: str, output: Any, meta: Any, trace_id: str) -> BusError | None:
    """The error to answer instead of a handler's answer that the caller could not decode.

    A map key that is not a string, or an answer that is not a map, is a bug in the
    handler (``internal_error``, logged); a container or string over the wire limits
    is too much (``bad_request``: ask for less).  Sent as it is, either would make the
    caller close the whole link and fail every other call on it.
    """
    if not isinstance(output, dict) or not isinstance(meta, dict):
        problem: tuple[str, str] | None = ("key", "the answer is not a map")
    else:
        problem = wire_shape_problem(output) or wire_shape_problem(meta)
    if problem is None:
        return None
    kind, where = problem
    if kind == "size":
        return BadRequest(f"{ref} produced an answer this link cannot carry ({where}); ask for less")
    log.error("answer_malformed", capability=ref, problem=where, trace_id=trace_id)
    return InternalError(f"internal error in {ref}: its answer cannot cross the wire (trace_id={trace_id})")


def _answer(value: Any, started: float) -> tuple[Any, dict[str, Any]]:
    """A handler's return value as ``(output, meta)``; ``meta.ms`` is its time unless it gave one."""
    if isinstance(value, tuple):
        output, given = value
        meta = dict(given)
        if "ms" not in meta:
            meta["ms"] = round((time.perf_counter() - started) * 1000, 3)
        return output, meta
    return value, {"ms": round((time.perf_counter() - started) * 1000, 3)}


def _handler_failure(
    exc: Exception, d: CapabilityDescriptor, trace_id: str
) -> tuple[BusError, BaseException | None]:
    """The error a caller gets for a handler that raised ``exc``, and its cause to chain: a
    BusError wrapped by a task group comes out as itself; anything else is logged (call this in
    the ``except`` block) and becomes ``internal_error``."""
    inner = bus_error_in(exc)
    if inner is not None:
        return inner, None
    if is_disk_full(exc):  # a store that did not say it itself: no traceback for a full disk
        log.warning("handler_disk_full", capability=d.ref, trace_id=trace_id)
        return disk_full(None, f"what {d.ref} writes"), exc
    log.exception("handler_failed", capability=d.ref, trace_id=trace_id)
    return InternalError(f"internal error in {d.ref} (trace_id={trace_id})"), exc


class Serving:
    """Serving calls, for :class:`~hearthnet.bus.bus.CapabilityBus`."""

    if TYPE_CHECKING:  # the bus's state (CapabilityBus sets it)
        registry: Registry
        router: Router
        stats: StatsBook
        sessions: dict[str, PeerSession]
        _level_of: LevelOf
        _kept_local: dict[str, list[dict[str, Any]]]
        _preferences: dict[str, Preference]
        _resolved_seen: dict[tuple[Any, ...], tuple[int, Registration]]

        @property
        def node_id(self) -> str: ...

    def _caller_level(self, node_id: str) -> Level | None:
        if node_id == self.node_id:
            return Level.ANCHOR  # the node's owner acting on their own node
        return self._level_of(node_id)

    def _resolve(
        self, capability: str, version: Version, params: Mapping[str, Any], *, remote_caller: bool
    ) -> Registration:
        key = lookup_key(capability, version, params, remote_caller)
        seen = self._resolved_seen.get(key) if key is not None else None
        if seen is not None and seen[0] == self.registry.version:
            return seen[1]
        reg = self.registry.find_local(capability, version, params, remote_caller=remote_caller)
        if reg is not None:
            if key is not None:
                remember(self._resolved_seen, key, (self.registry.version, reg))
            return reg
        names = [r.descriptor for r in self.registry.local() if r.descriptor.name == capability]
        if remote_caller:
            names = [d for d in names if not d.local_only]
        if names and not any(d.version[0] == version[0] and d.version[1] >= version[1] for d in names):
            offered = ", ".join(d.ref for d in names)
            raise SchemaMismatch(f"{capability}@{version_text(version)} not offered here (have {offered})")
        raise NotFound(f"no provider of {capability}@{version_text(version)} for these params on this node")

    async def _dispatch_remote(self, session: PeerSession, inc: IncomingCall) -> None:
        req = inc.request
        started = time.perf_counter()
        ref = UNRESOLVED
        error: BusError | None = None
        answer: tuple[dict[str, Any], dict[str, Any]] | None = None
        stats = None
        try:
            version = parse_version(req.version)
            reg = self._resolve(req.capability, version, req.params, remote_caller=True)
            d = reg.descriptor
            ref = inc.ref = d.ref
            stats = self.stats.get(ref)
            level = self._caller_level(session.peer_id)
            self._check_trust(d, level, session.peer_id)
            assert level is not None
            now = loop_time()
            ctx = RemoteCallContext(
                inc,
                version=version,
                caller_level=level,
                # the caller's deadline, but never longer than this capability's own timeout:
                # a member must not hold a slot for an hour by asking for an hour
                deadline=now + min(req.deadline_ms / 1000, d.timeout_seconds),
            )
            answer = await self._run_remote(reg, ctx, stats, inc, now)
        except BusError as exc:
            error = exc
            if stats is None:  # refused before any capability was found: not under the peer's name
                self.stats.get(ref).record((time.perf_counter() - started) * 1000, exc.code)
        if answer is not None:
            output, meta = answer
            error = _unsendable(ref, output, meta, req.trace_id)
            if error is None:
                try:
                    await session.send({"t": "done", "id": req.id, "output": output, "meta": meta})
                    return
                except ProtocolError as exc:  # the answer cannot be sent (e.g. larger than a frame)
                    error = BadRequest(
                        f"{ref} produced an answer this link cannot carry: {exc.message}; ask for less"
                    )
                    log.warning(
                        "answer_not_sendable", capability=ref, reason=exc.message, trace_id=req.trace_id
                    )
                except BusError:
                    return  # the link is gone: nobody is waiting for the answer
        if error is not None:
            await session.send_quiet({"t": "error", "id": req.id, **error.to_wire()})

    async def _answer_cut(self, session: PeerSession, inc: IncomingCall) -> None:
        """Answer a peer's call whose handler its deadline or its caller's ``cancel`` cut short."""
        if inc.cancelled and not inc.deadline_passed:
            return  # the caller cancelled: it expects no answer
        error = Timeout(f"{inc.ref} did not finish within its deadline")
        await session.send_quiet({"t": "error", "id": inc.request.id, **error.to_wire()})

    def _check_trust(self, d: CapabilityDescriptor, level: Level | None, caller: str) -> None:
        if level is None:
            raise Unauthorized(f"{caller} is not a member of this community")
        if level < d.trust_required:
            need = d.trust_required.label
            raise Unauthorized(
                f"{d.name} needs trust level {need}; caller is {level.label} (an anchor can promote "
                f"it: 'hearthnet member promote {caller} --level {need}')"
            )

    def _admit(self, d: CapabilityDescriptor, stats: CapabilityStats, caller: str, now: float) -> None:
        """Take one of the capability's slots for ``caller`` or raise ``capacity_exceeded``."""
        refusal = stats.slots.take(caller, d.max_concurrent, now, remember=stats.waiter_memory)
        if refusal is None:
            return
        retry = stats.retry_after_ms()
        stats.record(None, "capacity_exceeded")
        if refusal.reason == "full":
            why = f"{d.ref} is at its limit of {d.max_concurrent} concurrent calls"
        elif refusal.reason == "reserved":
            why = f"{d.ref}: its free slots are kept for callers refused earlier (limit {d.max_concurrent})"
        else:
            why = (
                f"{d.ref}: this caller already runs {refusal.held} of its fair share of "
                f"{refusal.share} concurrent calls while others wait (limit {d.max_concurrent})"
            )
        raise CapacityExceeded(why, retry_after_ms=retry)

    async def _invoke(self, reg: Registration, ctx: CallContext, stats: CapabilityStats) -> CallResult:
        """Run a handler of this node's own call under its concurrency limit and deadline (its
        own cancel scope); map every failure to a BusError."""
        d = reg.descriptor
        now = loop_time()
        self._admit(d, stats, ctx.caller, now)
        started = time.perf_counter()
        code: str | None = None
        try:
            if ctx.deadline <= now:
                raise Timeout(f"deadline passed before {d.ref} started")
            value: Any = _UNSET
            with anyio.CancelScope(deadline=ctx.deadline):
                value = await reg.handler(ctx)
            if value is _UNSET:
                raise Timeout(f"{d.ref} did not finish within its deadline")
            output, meta = _answer(value, started)
            return CallResult(output, meta, self.node_id)
        except BusError as exc:
            code = exc.code
            raise
        except Exception as exc:
            error, cause = _handler_failure(exc, d, ctx.trace_id)
            code = error.code
            raise error from cause
        finally:
            stats.slots.give_back(ctx.caller)
            stats.record((time.perf_counter() - started) * 1000, code)

    async def _run_remote(
        self,
        reg: Registration,
        ctx: CallContext,
        stats: CapabilityStats,
        inc: IncomingCall,
        now: float,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run the handler of a peer's call as :meth:`_invoke` does, in its worker's cancel scope.

        The session's timer keeps the deadline and the peer's ``cancel`` cuts the handler
        short (:meth:`IncomingCall.start`): the cancellation then leaves this method and the
        worker's scope, and :meth:`_answer_cut` answers.  Returns ``(output, meta)``.
        """
        d = reg.descriptor
        self._admit(d, stats, ctx.caller, now)
        started = time.perf_counter()
        code: str | None = None
        try:
            if ctx.deadline <= now:
                raise Timeout(f"deadline passed before {d.ref} started")
            inc.start(ctx.deadline)
            try:
                value = await reg.handler(ctx)
            finally:
                inc.stop()
            return _answer(value, started)
        except BusError as exc:
            code = exc.code
            raise
        except Exception as exc:
            error, cause = _handler_failure(exc, d, ctx.trace_id)
            code = error.code
            raise error from cause
        except BaseException:
            if inc.cancelled or inc.deadline_passed:  # cut short here, answered by _answer_cut
                code = "cancelled" if inc.cancelled and not inc.deadline_passed else "timeout"
            raise
        finally:
            stats.slots.give_back(ctx.caller)
            stats.record((time.perf_counter() - started) * 1000, code)

    # calling ----------------------------------------------------------------------
