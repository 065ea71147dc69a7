"""The calling side of the bus: a call sent to the best provider (here or on a peer) under its
deadline, retried on the next provider when idempotent, tried beside a provider that stays
silent past half the time left, and streamed calls (a part of
:class:`~hearthnet.bus.bus.CapabilityBus`)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.api import CallStream, ProviderInfo
from hearthnet.bus.call_origins import LocalCallContext
from hearthnet.bus.context import CallContext, CallResult
from hearthnet.bus.descriptors import (
    Registration,
    Version,
)
from hearthnet.bus.flow import loop_time
from hearthnet.bus.liveness import Liveness
from hearthnet.bus.registry import Registry, lookup_key, remember
from hearthnet.bus.router import Preference, Router
from hearthnet.bus.session import OutgoingCall, PeerSession
from hearthnet.bus.stats import StatsBook
from hearthnet.bus.versions import version_text
from hearthnet.community.levels import Level
from hearthnet.errors import (
    BusError,
    NotFound,
    Partition,
    Timeout,
)

log = structlog.get_logger("hearthnet.bus")

_HEALTH_NEUTRAL = ("bad_request", "unauthorized", "not_found", "schema_mismatch", "capacity_exceeded")
_RETRYABLE = ("partition", "timeout", "capacity_exceeded", "internal_error", "not_found")


def _new_trace_id() -> str:
    """16 hex digits that tie a call's log lines together (unique, not secret)."""
    return f"{random.getrandbits(64):016x}"


HEDGE_AFTER = 0.5
"""Share of the time left when a remote attempt of an idempotent call started after which,
still unanswered, the next provider is tried beside it."""


def _hedgeable(cand: ProviderInfo) -> bool:
    """Whether another provider may be tried beside ``cand`` while it runs: it is remote (a
    handler in this process cannot go silent while the node runs) and running it twice is safe."""
    return not cand.is_local and cand.descriptor.idempotent


class Calling:
    """Calling capabilities, for :class:`~hearthnet.bus.bus.CapabilityBus`."""

    if TYPE_CHECKING:  # the bus's state (CapabilityBus sets it) and its serving side
        registry: Registry
        liveness: Liveness
        router: Router
        stats: StatsBook
        sessions: dict[str, PeerSession]
        _kept_local: dict[str, list[dict[str, Any]]]
        _preferences: dict[str, Preference]
        _eligible_seen: dict[tuple[Any, ...], tuple[int, list[ProviderInfo]]]

        @property
        def node_id(self) -> str: ...

        def _resolve(
            self, capability: str, version: Version, params: Mapping[str, Any], *, remote_caller: bool
        ) -> Registration: ...

        async def _invoke(self, reg: Registration, ctx: CallContext, stats: Any) -> CallResult: ...

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
        ordered = self.router.order(
            candidates,
            capability,
            now=now,
            local_saturated=local_saturated,
            preference=self._preferences.get(capability),
        )
        return self._silent_last(ordered)

    def _silent_last(self, candidates: list[ProviderInfo]) -> list[ProviderInfo]:
        """Providers whose link has been silent for two keepalive periods go last: a peer whose lid
        closed or whose cable was pulled sends nothing, and until its link is given up as dead
        (``dead_after_seconds``) a call sent to it would only wait for that."""
        window = 2 * self.liveness.keepalive_seconds
        now = time.monotonic()
        silent = [
            c
            for c in candidates
            if not c.is_local
            and (s := self.sessions.get(c.node_id)) is not None
            and now - s.link.last_received > window
        ]
        if not silent:
            return candidates
        return [c for c in candidates if c not in silent] + silent

    def _eligible(
        self, capability: str, version: Version, params: Mapping[str, Any], provider: str | None
    ) -> list[ProviderInfo]:
        """The providers a call may go to, in the registry's order (not yet by health or load)."""
        key = lookup_key(capability, version, params, provider)
        seen = self._eligible_seen.get(key) if key is not None else None
        if seen is not None and seen[0] == self.registry.version:
            return seen[1]
        candidates = self.registry.providers(capability, version, params)
        if provider is not None:
            candidates = [c for c in candidates if c.node_id == provider]
            if not candidates:
                if provider != self.node_id and provider not in self.sessions:
                    raise Partition(f"node {provider} is not connected")
                raise NotFound(f"{provider} offers no {capability}@{version_text(version)} for these params")
        if not candidates:
            raise NotFound(f"no provider of {capability}@{version_text(version)} for params {dict(params)}")
        if self._is_kept_local(capability, params) or any(
            c.is_local and c.descriptor.local_only for c in candidates
        ):
            # what this node keeps to itself (the personal corpus) never goes to a peer,
            # even one that claims to serve the same name and params
            candidates = [c for c in candidates if c.is_local]
            if not candidates:
                raise NotFound(f"{capability} for params {dict(params)} is only served by this node itself")
        if key is not None:
            remember(self._eligible_seen, key, (self.registry.version, candidates))
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
                _log_failure(capability, cand, exc, trace)
        raise last if last is not None else _unanswered(capability)

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
                    with anyio.CancelScope(
                        deadline=_hedge_time(candidates, started_at, running, deadline)
                    ) as overdue:
                        k, outcome = await ended_rx.receive()
                    if overdue.cancelled_caught:
                        _log_hedge(capability, candidates[newest], candidates[newest + 1], trace_id)
                        start()
                        continue
                    running.discard(k)
                    if isinstance(outcome, CallResult):
                        winner, result = k, outcome
                        break
                    last = outcome
                    _log_failure(capability, candidates[k], outcome, trace_id)
                    if outcome.code not in _RETRYABLE:
                        break
                    if (
                        candidates[k].descriptor.idempotent
                        and len(started_at) < len(candidates)
                        and anyio.current_time() < deadline
                    ):
                        start()
                tg.cancel_scope.cancel()
        if result is None:
            raise last if last is not None else _unanswered(capability)
        self._quarantine_overtaken([candidates[k] for k in running if k < winner], capability, trace_id)
        return result

    def _quarantine_overtaken(self, overtaken: list[ProviderInfo], capability: str, trace_id: str) -> None:
        """Quarantine the remote providers a race's winner overtook (they started before it)."""
        now = anyio.current_time()
        for cand in overtaken:
            if not cand.is_local:
                self._quarantine(cand, capability, "overtaken", trace_id, now)

    def _quarantine(
        self, cand: ProviderInfo, capability: str, reason: str, trace_id: str, now: float
    ) -> None:
        """Keep calls of ``capability`` off a provider for a while: it was silent, or overtaken."""
        self.router.quarantine(cand.node_id, capability, now=now)
        log.warning(
            "provider_quarantined",
            capability=capability,
            provider=cand.node_id,
            reason=reason,
            trace_id=trace_id,
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
                version_text(version),
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
                self._quarantine(cand, capability, "silent", trace_id, now)
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
            try:
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
            finally:
                local.release()
            if failure is not None:
                raise failure
            return
        session = self.sessions.get(cand.node_id)
        if session is None:
            raise Partition(f"node {cand.node_id} is not connected")
        call = await session.request(
            capability,
            version_text(version),
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
            call.release()


class _LocalStream(CallStream):
    def __init__(self, ctx: LocalCallContext) -> None:
        self._ctx = ctx
        self._result: CallResult | None = None
        self._error: BusError | None = None
        self._done = anyio.Event()

    async def run(self, bus: Calling, reg: Registration) -> None:
        try:
            self._result = await bus._invoke(reg, self._ctx, bus.stats.get(reg.descriptor.ref))
        except BusError as exc:
            self._error = exc
        finally:
            self._ctx.frames_tx.close()
            self._ctx.input_rx.close()  # a sender still waiting learns that nobody will read
            self._done.set()

    def release(self) -> None:
        """The caller's ends of the call's streams, closed once the call is over (the handler's
        ends are closed when it returns); an unclosed memory stream warns when collected."""
        self._ctx.frames_rx.close()
        self._ctx.input_tx.close()

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


def _hedge_time(
    candidates: list[ProviderInfo], started_at: list[float], running: set[int], deadline: float
) -> float:
    """When the newest attempt of a race is overdue and the next provider starts beside it
    (``inf``: never, e.g. it has ended, it is the last provider, or it may not be hedged)."""
    newest = len(started_at) - 1
    if newest + 1 < len(candidates) and newest in running and _hedgeable(candidates[newest]):
        return started_at[newest] + HEDGE_AFTER * (deadline - started_at[newest])
    return math.inf


def _log_hedge(capability: str, overdue: ProviderInfo, beside: ProviderInfo, trace_id: str) -> None:
    log.info(
        "call_hedged", capability=capability, overdue=overdue.node_id, next=beside.node_id, trace_id=trace_id
    )


def _log_failure(capability: str, cand: ProviderInfo, exc: BusError, trace_id: str) -> None:
    log.info("call_failed", capability=capability, provider=cand.node_id, code=exc.code, trace_id=trace_id)


def _unanswered(capability: str) -> Timeout:
    return Timeout(f"{capability} deadline passed before any provider answered")
