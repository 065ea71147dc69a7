"""The capability bus: register handlers, call capabilities here or on peers.

The bus owns no sockets: the peer manager hands it authenticated links
(``attach``) and the bus runs a :class:`PeerSession` on each.  Calls go to the
best provider (``Router``), deadlines travel with them, idempotent calls are
retried on the next provider (or tried there beside a provider that stays
silent past half the deadline), and over ``max_concurrent`` a handler answers
``capacity_exceeded`` with a retry hint instead of queueing without bound.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.api import CallStream, ProviderInfo
from hearthnet.bus.context import CallContext, CallResult
from hearthnet.bus.contexts import LocalCallContext, RemoteCallContext
from hearthnet.bus.descriptors import (
    CapabilityDescriptor,
    Registration,
    Version,
    parse_version,
)
from hearthnet.bus.flow import loop_time
from hearthnet.bus.manifest import MANIFEST_TTL_MS, sign_manifest, verify_manifest
from hearthnet.bus.predicates import preference_for
from hearthnet.bus.registry import Registry
from hearthnet.bus.router import Router
from hearthnet.bus.session import IncomingCall, Liveness, OutgoingCall, PeerSession
from hearthnet.bus.sightings import Sightings
from hearthnet.bus.stats import CapabilityStats, StatsBook
from hearthnet.community.levels import Level
from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    InternalError,
    NotFound,
    Partition,
    ProtocolError,
    SchemaMismatch,
    Timeout,
    Unauthorized,
    bus_error_in,
)
from hearthnet.identity import Identity
from hearthnet.transport.link import Link
from hearthnet.wire.codec import wire_shape_problem

log = structlog.get_logger("hearthnet.bus")

LevelOf = Callable[[str], Level | None]
ControlCallback = Callable[[PeerSession, dict[str, Any]], Awaitable[None]]
SessionCallback = Callable[[PeerSession], Coroutine[Any, Any, None]]

UNRESOLVED = "(unresolved)"
"""``node.stats`` key of peers' calls refused before a capability was found (never the peer's own string)."""
_HEALTH_NEUTRAL = ("bad_request", "unauthorized", "not_found", "schema_mismatch", "capacity_exceeded")
_RETRYABLE = ("partition", "timeout", "capacity_exceeded", "internal_error", "not_found")


_UNSET = object()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _new_trace_id() -> str:
    """16 hex digits that tie a call's log lines together (unique, not secret)."""
    return f"{random.getrandbits(64):016x}"


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
    log.exception("handler_failed", capability=d.ref, trace_id=trace_id)
    return InternalError(f"internal error in {d.ref} (trace_id={trace_id})"), exc


HEDGE_AFTER = 0.5
"""Share of the time left when a remote attempt of an idempotent call started after which,
still unanswered, the next provider is tried beside it."""


def _hedgeable(cand: ProviderInfo) -> bool:
    """Whether another provider may be tried beside ``cand`` while it runs: it is remote (a
    handler in this process cannot go silent while the node runs) and running it twice is safe."""
    return not cand.is_local and cand.descriptor.idempotent


def _version_text(v: Version) -> str:
    text = _VERSION_TEXTS.get(v)
    if text is None:
        text = f"{v[0]}.{v[1]}"
        _remember(_VERSION_TEXTS, v, text)
    return text


_VERSION_TEXTS: dict[Version, str] = {}
_REMEMBERED = 256
"""Entries a lookup cache holds before it starts afresh (names and params come from peers too)."""


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _REMEMBERED:
        cache.clear()
    cache[key] = value


def _lookup_key(
    capability: str, version: Version, params: Mapping[str, Any], extra: Any
) -> tuple[Any, ...] | None:
    """A key for caching a lookup of these arguments, or ``None`` (not cached).

    Only params whose values are all text: two such params are equal exactly when
    their items are, so a predicate cannot tell apart what the key holds together.
    """
    items = tuple(params.items())
    for _, value in items:
        if type(value) is not str:
            return None
    return capability, version, extra, items


class CapabilityBus:
    """Registry + router + sessions of one node."""

    def __init__(
        self,
        identity: Identity,
        *,
        level_of: LevelOf,
        community_id: Callable[[], str | None],
        name: str = "",
        addresses: Callable[[], list[str]] = list,
        liveness: Liveness | None = None,
    ) -> None:
        self.identity = identity
        self.liveness = liveness or Liveness()
        self._level_of = level_of
        self._community_id = community_id
        self.name = name
        self._addresses = addresses
        self.registry = Registry(identity.node_id)
        self.router = Router()
        self.stats = StatsBook()
        self.sightings = Sightings()
        """Each peer's name and when its link last went down (for "offline since")."""
        self.sessions: dict[str, PeerSession] = {}
        self._control: dict[str, ControlCallback] = {}
        self._on_session_up: list[SessionCallback] = []
        self._on_session_down: list[SessionCallback] = []
        self._peer_ready: dict[str, anyio.Event] = {}
        self._peer_faults: dict[str, dict[str, int]] = {}
        self._kept_local: dict[str, list[dict[str, Any]]] = {}
        # Lookups repeated on every call, kept per (capability, version, params, ...) while the
        # registry's version (and the kept-local rules) stay as they were: see _lookup_key.
        self._eligible_seen: dict[tuple[Any, ...], tuple[int, list[ProviderInfo]]] = {}
        self._resolved_seen: dict[tuple[Any, ...], tuple[int, Registration]] = {}
        self._manifest_seq = 0
        self._announced = -1
        self._announce_event = anyio.Event()

    # identity -----------------------------------------------------------------
    @property
    def node_id(self) -> str:
        return self.identity.node_id

    # registration ---------------------------------------------------------------
    def register(self, registration: Registration) -> None:
        self.registry.add_local(registration)
        self._announce_event.set()

    def unregister(self, name: str, params: Mapping[str, Any]) -> None:
        self.registry.remove_local(name, params)
        self._announce_event.set()

    def on_control(self, message_type: str, callback: ControlCallback) -> None:
        self._control[message_type] = callback

    def on_session_up(self, callback: SessionCallback) -> None:
        self._on_session_up.append(callback)

    def on_session_down(self, callback: SessionCallback) -> None:
        self._on_session_down.append(callback)

    def providers(
        self, capability: str, version: Version = (1, 0), params: Mapping[str, Any] | None = None
    ) -> list[ProviderInfo]:
        return self.registry.providers(capability, version, dict(params or {}))

    def offers(self, capability: str, version: Version = (1, 0)) -> list[ProviderInfo]:
        return self.registry.offers(capability, version)

    # sessions -----------------------------------------------------------------
    async def attach(self, link: Link) -> None:
        """Serve one authenticated link until it closes (run it in a task)."""
        session = PeerSession(
            link,
            dispatcher=self._dispatch_remote,
            on_control=self._handle_control,
            liveness=self.liveness,
            on_cut=self._answer_cut,
        )
        old = self.sessions.get(link.peer_id)
        self.sessions[link.peer_id] = session
        if old is not None:
            await old.aclose()
        log.info("peer_up", peer=link.peer_id, address=link.remote_address)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._session_run_then_cancel, session, tg.cancel_scope)
                await session.send_quiet({"t": "manifest", "manifest": self._signed_manifest()})
        finally:
            faults = self._peer_faults.setdefault(link.peer_id, {"protocol_errors": 0, "refused_calls": 0})
            faults["protocol_errors"] += int(session.protocol_error)
            faults["refused_calls"] += session.refused_calls
            if self.sessions.get(link.peer_id) is session:
                self.sightings.went_down(link.peer_id, time.time())
                del self.sessions[link.peer_id]
                self._peer_ready.pop(link.peer_id, None)
                self.registry.drop_remote(link.peer_id)
                self.router.forget(link.peer_id)
            log.info("peer_down", peer=link.peer_id, reason=session.close_reason or "closed")
            with anyio.CancelScope(shield=True):
                for cb in self._on_session_down:
                    try:
                        await cb(session)
                    except Exception:  # a callback's failure must not hide the link's end
                        log.exception("session_down_callback_failed", peer=link.peer_id)

    async def _session_run_then_cancel(self, session: PeerSession, scope: anyio.CancelScope) -> None:
        await session.run()
        scope.cancel()

    def peer_faults(self) -> dict[str, dict[str, int]]:
        """Per peer: links closed for protocol errors, calls refused for too many in flight."""
        out = {peer: dict(counts) for peer, counts in self._peer_faults.items()}
        for peer, session in self.sessions.items():
            entry = out.setdefault(peer, {"protocol_errors": 0, "refused_calls": 0})
            entry["refused_calls"] += session.refused_calls
        return out

    async def wait_peer(self, node_id: str) -> None:
        """Return once ``node_id`` is connected and its manifest is known."""
        if node_id in self.registry.remote_nodes():
            return
        await self._peer_ready.setdefault(node_id, anyio.Event()).wait()

    async def disconnect(self, node_id: str) -> None:
        session = self.sessions.get(node_id)
        if session is not None:
            await session.aclose()

    # manifests ------------------------------------------------------------------
    def _signed_manifest(self) -> dict[str, Any]:
        # milliseconds since the epoch, kept increasing: a restarted node's manifests are
        # newer than those of its previous run, which a peer may still hold
        self._manifest_seq = max(self._manifest_seq + 1, _now_ms())
        descriptors = [r.descriptor for r in self.registry.local()]
        return sign_manifest(
            self.identity,
            community_id=self._community_id() or "",
            seq=self._manifest_seq,
            now_ms=_now_ms(),
            name=self.name,
            addresses=self._addresses(),
            capabilities=descriptors,
        )

    async def run_announcer(self, *, refresh_seconds: float = MANIFEST_TTL_MS / 3000) -> None:
        """Push a fresh manifest to every peer when capabilities change and periodically."""
        while True:
            with anyio.move_on_after(refresh_seconds):
                await self._announce_event.wait()
            self._announce_event = anyio.Event()
            self.registry.expire(_now_ms())
            if self.sessions:
                message = {"t": "manifest", "manifest": self._signed_manifest()}
                for session in list(self.sessions.values()):
                    # in the session's own tasks: a peer that stopped reading holds up only itself
                    session.spawn(session.send_quiet, message)

    async def _handle_control(self, session: PeerSession, msg: dict[str, Any]) -> None:
        t = msg.get("t")
        if t == "manifest":
            wire = msg.get("manifest")
            if not isinstance(wire, dict):
                return
            try:
                manifest = verify_manifest(
                    wire, peer_id=session.peer_id, community_id=self._community_id() or "", now_ms=_now_ms()
                )
            except BusError as exc:
                log.warning("manifest_rejected", peer=session.peer_id, code=exc.code, reason=exc.message)
                return
            if self.registry.set_remote(manifest):
                self.sightings.named(manifest.node_id, manifest.name)
            if not session.manifest_seen:
                # The peer is usable once we know what it offers: only now run the "up" callbacks.
                session.manifest_seen = True
                self._peer_ready.setdefault(session.peer_id, anyio.Event()).set()
                for cb in self._on_session_up:
                    session.spawn(cb, session)
            return
        callback = self._control.get(str(t))
        if callback is not None:
            await callback(session, msg)

    # serving ----------------------------------------------------------------------
    def _caller_level(self, node_id: str) -> Level | None:
        if node_id == self.node_id:
            return Level.ANCHOR  # the node's owner acting on their own node
        return self._level_of(node_id)

    def _resolve(
        self, capability: str, version: Version, params: Mapping[str, Any], *, remote_caller: bool
    ) -> Registration:
        key = _lookup_key(capability, version, params, remote_caller)
        seen = self._resolved_seen.get(key) if key is not None else None
        if seen is not None and seen[0] == self.registry.version:
            return seen[1]
        reg = self.registry.find_local(capability, version, params, remote_caller=remote_caller)
        if reg is not None:
            if key is not None:
                _remember(self._resolved_seen, key, (self.registry.version, reg))
            return reg
        names = [r.descriptor for r in self.registry.local() if r.descriptor.name == capability]
        if remote_caller:
            names = [d for d in names if not d.local_only]
        if names and not any(d.version[0] == version[0] and d.version[1] >= version[1] for d in names):
            offered = ", ".join(d.ref for d in names)
            raise SchemaMismatch(f"{capability}@{_version_text(version)} not offered here (have {offered})")
        raise NotFound(f"no provider of {capability}@{_version_text(version)} for these params on this node")

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
            raise Unauthorized(
                f"{d.name} needs trust level {d.trust_required.label}; caller is {level.label}"
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
    def keep_local(self, capability: str, params: Mapping[str, Any]) -> None:
        """Never send calls of ``capability`` whose params include ``params`` to a peer.

        For what must not leave this node even before a local provider exists
        (a query of the personal corpus): a peer advertising it gets nothing.
        """
        self._kept_local.setdefault(capability, []).append(dict(params))
        self._eligible_seen.clear()

    def _is_kept_local(self, capability: str, params: Mapping[str, Any]) -> bool:
        kept = self._kept_local.get(capability)
        return kept is not None and any(
            all(k in params and params[k] == v for k, v in rule.items()) for rule in kept
        )

    def _candidates(
        self,
        capability: str,
        version: Version,
        params: Mapping[str, Any],
        provider: str | None,
        *,
        now: float,
    ) -> list[ProviderInfo]:
        candidates = self._eligible(capability, version, params, provider)
        if len(candidates) == 1:
            return candidates  # whatever its health or load, it is the only one to try
        local_saturated = False
        for c in candidates:
            if c.is_local:
                stats = self.stats.get(c.descriptor.ref)
                local_saturated = not stats.slots.would_take(self.node_id, c.descriptor.max_concurrent, now)
        return self.router.order(
            candidates,
            capability,
            now=now,
            local_saturated=local_saturated,
            preference=preference_for(capability),
        )

    def _eligible(
        self, capability: str, version: Version, params: Mapping[str, Any], provider: str | None
    ) -> list[ProviderInfo]:
        """The providers a call may go to, in the registry's order (not yet by health or load)."""
        key = _lookup_key(capability, version, params, provider)
        seen = self._eligible_seen.get(key) if key is not None else None
        if seen is not None and seen[0] == self.registry.version:
            return seen[1]
        candidates = self.registry.providers(capability, version, params)
        if provider is not None:
            candidates = [c for c in candidates if c.node_id == provider]
            if not candidates:
                if provider != self.node_id and provider not in self.sessions:
                    raise Partition(f"node {provider} is not connected")
                raise NotFound(f"{provider} offers no {capability}@{_version_text(version)} for these params")
        if not candidates:
            raise NotFound(f"no provider of {capability}@{_version_text(version)} for params {dict(params)}")
        if self._is_kept_local(capability, params) or any(
            c.is_local and c.descriptor.local_only for c in candidates
        ):
            # what this node keeps to itself (the personal corpus) never goes to a peer,
            # even one that claims to serve the same name and params
            candidates = [c for c in candidates if c.is_local]
            if not candidates:
                raise NotFound(f"{capability} for params {dict(params)} is only served by this node itself")
        if key is not None:
            _remember(self._eligible_seen, key, (self.registry.version, candidates))
        return candidates

    async def call(
        self,
        capability: str,
        version: Version = (1, 0),
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
        trace_id: str | None = None,
    ) -> CallResult:
        """Call the best provider; retry an idempotent call on the next one, or hedge it.

        A remote provider of an idempotent call that has not answered once half the time
        left when it started has passed gets the next provider tried beside it
        (``HEDGE_AFTER``): the first answer wins, the other attempt is cancelled, and the
        provider that was overtaken is quarantined.  A frozen provider (a stopped process,
        a link that still looks up) thus costs one call half its deadline, and the calls
        after it nothing, while a slow but healthy provider keeps its whole deadline.
        """
        params_d, input_d = dict(params or {}), dict(input or {})
        now = loop_time()
        candidates = self._candidates(capability, version, params_d, provider, now=now)
        budget = timeout if timeout is not None else candidates[0].descriptor.timeout_seconds
        deadline = now + budget
        trace = trace_id or _new_trace_id()
        last: BusError | None = None
        for attempt, cand in enumerate(candidates):
            if attempt and (
                last is None
                or last.code not in _RETRYABLE
                or not candidates[attempt - 1].descriptor.idempotent  # the one that may have run it
                or loop_time() >= deadline
            ):
                break
            if attempt + 1 < len(candidates) and _hedgeable(cand):
                return await self._race(
                    candidates[attempt:], capability, version, params_d, input_d, deadline, trace
                )
            try:
                return await self._call_one(cand, capability, version, params_d, input_d, deadline, trace)
            except BusError as exc:
                last = exc
                log.info(
                    "call_failed", capability=capability, provider=cand.node_id, code=exc.code, trace_id=trace
                )
        if last is None:
            last = Timeout(f"{capability} deadline passed before any provider answered")
        raise last

    async def _race(
        self,
        candidates: list[ProviderInfo],
        capability: str,
        version: Version,
        params: dict[str, Any],
        input: dict[str, Any],
        deadline: float,
        trace_id: str,
    ) -> CallResult:
        """Try ``candidates`` in order, the next beside the newest once it is overdue (see ``call``).

        The next one also starts at once when an attempt fails in a way another provider
        may not (``_RETRYABLE``) on a provider that declared the call idempotent; any other
        failure ends the call.  The first answer wins and the attempts still running are
        cancelled; those that were overtaken (started before the winner) are quarantined.
        """
        ended_tx, ended_rx = anyio.create_memory_object_stream[tuple[int, CallResult | BusError]](
            len(candidates)
        )
        started_at: list[float] = []
        running: set[int] = set()
        last: BusError | None = None
        winner = -1
        result: CallResult | None = None

        async def attempt(k: int) -> None:
            outcome: CallResult | BusError
            try:
                outcome = await self._call_one(
                    candidates[k], capability, version, params, input, deadline, trace_id
                )
            except BusError as exc:
                outcome = exc
            ended_tx.send_nowait((k, outcome))  # room for every attempt: never blocks

        with ended_tx, ended_rx:
            async with anyio.create_task_group() as tg:

                def start() -> None:
                    started_at.append(anyio.current_time())
                    running.add(len(started_at) - 1)
                    tg.start_soon(attempt, len(started_at) - 1)

                start()
                while running:
                    newest = len(started_at) - 1
                    hedge_at = math.inf
                    if newest + 1 < len(candidates) and newest in running and _hedgeable(candidates[newest]):
                        hedge_at = started_at[newest] + HEDGE_AFTER * (deadline - started_at[newest])
                    with anyio.CancelScope(deadline=hedge_at) as overdue:
                        k, outcome = await ended_rx.receive()
                    if overdue.cancelled_caught:
                        log.info(
                            "call_hedged",
                            capability=capability,
                            overdue=candidates[newest].node_id,
                            next=candidates[newest + 1].node_id,
                            trace_id=trace_id,
                        )
                        start()
                        continue
                    running.discard(k)
                    if isinstance(outcome, CallResult):
                        winner, result = k, outcome
                        break
                    last = outcome
                    log.info(
                        "call_failed",
                        capability=capability,
                        provider=candidates[k].node_id,
                        code=outcome.code,
                        trace_id=trace_id,
                    )
                    if outcome.code not in _RETRYABLE:
                        break
                    if (
                        candidates[k].descriptor.idempotent
                        and len(started_at) < len(candidates)
                        and anyio.current_time() < deadline
                    ):
                        start()
                tg.cancel_scope.cancel()
        if result is not None:
            now = anyio.current_time()
            for k in running:
                if k < winner and not candidates[k].is_local:
                    self.router.quarantine(candidates[k].node_id, capability, now=now)
                    log.warning(
                        "provider_quarantined",
                        capability=capability,
                        provider=candidates[k].node_id,
                        reason="overtaken",
                        trace_id=trace_id,
                    )
            return result
        raise (
            last
            if last is not None
            else Timeout(f"{capability} deadline passed before any provider answered")
        )

    def _local_call(
        self,
        capability: str,
        version: Version,
        params: dict[str, Any],
        input: dict[str, Any],
        deadline: float,
        trace_id: str,
        *,
        stream: bool,
    ) -> tuple[Registration, LocalCallContext]:
        """The handler and context of a call this node makes to itself (with the owner's rights)."""
        reg = self._resolve(capability, version, params, remote_caller=False)
        ctx = LocalCallContext(
            capability=capability,
            version=version,
            params=params,
            input=input,
            caller=self.node_id,
            caller_level=Level.ANCHOR,
            deadline=deadline,
            trace_id=trace_id,
            stream=stream,
        )
        return reg, ctx

    async def _call_one(
        self,
        cand: ProviderInfo,
        capability: str,
        version: Version,
        params: dict[str, Any],
        input: dict[str, Any],
        deadline: float,
        trace_id: str,
    ) -> CallResult:
        if cand.is_local:
            reg, ctx = self._local_call(capability, version, params, input, deadline, trace_id, stream=False)
            return await self._invoke(reg, ctx, self.stats.get(reg.descriptor.ref))
        session = self.sessions.get(cand.node_id)
        if session is None:
            raise Partition(f"node {cand.node_id} is not connected")
        self.router.started(cand.node_id, capability)
        started = time.perf_counter()
        call: OutgoingCall | None = None
        try:
            remaining = deadline - loop_time()
            call = await session.request(
                capability,
                _version_text(version),
                params,
                input,
                deadline_ms=max(1, int(remaining * 1000)),
                trace_id=trace_id,
                stream=False,
                # the handler's own deadline answers first; this covers a peer that never does
                give_up_at=deadline + 0.05,
            )
            result = await call.result.wait()
        except BusError as exc:
            now = anyio.current_time()
            self.router.record_failure(
                cand.node_id, capability, now=now, counts=exc.code not in _HEALTH_NEUTRAL
            )
            if call is not None and call.gave_up:  # not a word by the deadline: frozen, or its link is
                self.router.quarantine(cand.node_id, capability, now=now)
                log.warning(
                    "provider_quarantined",
                    capability=capability,
                    provider=cand.node_id,
                    reason="silent",
                    trace_id=trace_id,
                )
            raise
        except BaseException:
            if call is not None:
                with anyio.CancelScope(shield=True):
                    await call.cancel()
            self.router.record_failure(cand.node_id, capability, now=anyio.current_time(), counts=False)
            raise
        self.router.record_success(cand.node_id, capability, (time.perf_counter() - started) * 1000)
        return result

    @asynccontextmanager
    async def stream(
        self,
        capability: str,
        version: Version = (1, 0),
        *,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        provider: str | None = None,
        trace_id: str | None = None,
    ) -> AsyncIterator[CallStream]:
        """A streamed call on the best provider (no retry: frames may already be consumed)."""
        params_d, input_d = dict(params or {}), dict(input or {})
        now = anyio.current_time()
        cand = self._candidates(capability, version, params_d, provider, now=now)[0]
        budget = timeout if timeout is not None else cand.descriptor.timeout_seconds
        deadline = now + budget
        trace = trace_id or _new_trace_id()
        if cand.is_local:
            reg, ctx = self._local_call(capability, version, params_d, input_d, deadline, trace, stream=True)
            local = _LocalStream(ctx)
            failure: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(local.run, self, reg)
                try:
                    yield local
                except Exception as exc:
                    # Re-raised below, outside the task group, so callers see the error
                    # itself rather than an ExceptionGroup wrapping it.
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
            if failure is not None:
                raise failure
            return
        session = self.sessions.get(cand.node_id)
        if session is None:
            raise Partition(f"node {cand.node_id} is not connected")
        call = await session.request(
            capability,
            _version_text(version),
            params_d,
            input_d,
            deadline_ms=max(1, int(budget * 1000)),
            trace_id=trace,
            stream=True,
            # a provider that neither answers nor grants input credit must not hold a sender forever
            give_up_at=deadline + 0.05,
        )
        remote = _RemoteStream(call, deadline)
        try:
            yield remote
        finally:
            if not call.result.done:
                with anyio.CancelScope(shield=True):
                    await call.cancel()


class _LocalStream(CallStream):
    def __init__(self, ctx: LocalCallContext) -> None:
        self._ctx = ctx
        self._result: CallResult | None = None
        self._error: BusError | None = None
        self._done = anyio.Event()

    async def run(self, bus: CapabilityBus, reg: Registration) -> None:
        try:
            self._result = await bus._invoke(reg, self._ctx, bus.stats.get(reg.descriptor.ref))
        except BusError as exc:
            self._error = exc
        finally:
            self._ctx.frames_tx.close()
            self._ctx.input_rx.close()  # a sender still waiting learns that nobody will read
            self._done.set()

    async def send(self, frame: dict[str, Any]) -> None:
        await self._send_input(frame)

    async def end_input(self) -> None:
        await self._send_input(None)

    async def _send_input(self, item: dict[str, Any] | None) -> None:
        """Queue input for the handler; once it has ended, raise its error (or do nothing)."""
        try:
            await self._ctx.input_tx.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._done.wait()
            if self._error is not None:
                raise self._error from None

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        async for frame in self._ctx.frames_rx:
            yield frame

    async def result(self) -> CallResult:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class _RemoteStream(CallStream):
    def __init__(self, call: OutgoingCall, deadline: float) -> None:
        self._call = call
        self._deadline = deadline

    async def send(self, frame: dict[str, Any]) -> None:
        await self._call.send_input(frame)

    async def end_input(self) -> None:
        await self._call.end_input()

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            # The deadline scope wraps only the wait, never a yield (scopes must not span yields).
            with anyio.move_on_after(max(0.0, self._deadline - anyio.current_time()) + 0.05) as scope:
                frame = await self._call.next_frame()
            if scope.cancelled_caught:
                await self._call.cancel()
                raise Timeout("streamed call did not finish within its deadline")
            if frame is None:
                return
            yield frame

    async def result(self) -> CallResult:
        try:
            with anyio.fail_after(max(0.0, self._deadline - anyio.current_time()) + 0.05):
                return await self._call.result.wait()
        except TimeoutError as exc:
            await self._call.cancel()
            raise Timeout("streamed call did not finish within its deadline") from exc


def check_input_keys(input: Mapping[Any, Any], allowed: set[str], capability: str = "") -> None:
    """Reject unknown input fields with ``bad_request`` naming (a few of) them (helps catch typos).

    A key may be bytes or a number (a peer's map): it is named, not a ``TypeError``.
    """
    unknown = sorted(str(k)[:40] for k in input if k not in allowed)
    if unknown:
        what = f"{capability} " if capability else ""
        raise BadRequest(f"unknown {what}input field(s): {', '.join(unknown[:8])}")
