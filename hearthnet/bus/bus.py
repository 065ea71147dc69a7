"""The capability bus: register handlers, call capabilities here or on peers.

The bus owns no sockets: the peer manager hands it authenticated links
(``attach``) and the bus runs a :class:`PeerSession` on each.  Calls go to the
best provider (``Router``), deadlines travel with them, idempotent calls are
retried on the next provider (or tried there beside a provider that stays
silent past half the deadline), and over ``max_concurrent`` a handler answers
``capacity_exceeded`` with a retry hint instead of queueing without bound.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.api import NoticeCallback, PeerCallback, ProviderInfo
from hearthnet.bus.calls import Calling
from hearthnet.bus.descriptors import (
    ParamsPredicate,
    Registration,
    Version,
)
from hearthnet.bus.liveness import Liveness
from hearthnet.bus.manifest import MANIFEST_TTL_MS, sign_manifest, verify_manifest
from hearthnet.bus.registry import Registry
from hearthnet.bus.router import Preference, Router
from hearthnet.bus.serve import LevelOf, Serving
from hearthnet.bus.session import PeerSession
from hearthnet.bus.sightings import Sighting, Sightings
from hearthnet.bus.stats import StatsBook
from hearthnet.errors import (
    BusError,
)
from hearthnet.identity import Identity
from hearthnet.transport.link import Link

log = structlog.get_logger("hearthnet.bus")

ControlCallback = Callable[[PeerSession, dict[str, Any]], Awaitable[None]]
SessionCallback = Callable[[PeerSession], Coroutine[Any, Any, None]]


def _now_ms() -> int:
    return int(time.time() * 1000)


class CapabilityBus(Serving, Calling):
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
        self._preferences: dict[str, Preference] = {}
        # Lookups repeated on every call, kept per (capability, version, params, ...) while the
        # registry's version (and the kept-local rules) stay as they were: see registry.lookup_key.
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

    def register_predicate(self, capability: str, predicate: ParamsPredicate) -> None:
        """How a remote provider of ``capability`` fits a call's params (default: every requested key
        offered with the same value); the node gives each capability family's from its contract."""
        self.registry.use_predicate(capability, predicate)

    def register_preference(self, capability: str, preference: Preference) -> None:
        """Which of the providers of ``capability`` that fit is tried first (a higher rank first)."""
        self._preferences[capability] = preference

    def on_control(self, message_type: str, callback: ControlCallback) -> None:
        self._control[message_type] = callback

    # peers, beside calls (PeerBus) ------------------------------------------------------------
    def connected(self) -> list[str]:
        return list(self.sessions)

    def sighting(self, node_id: str) -> Sighting | None:
        return self.sightings.get(node_id)

    def spawn_for(self, peer: str, fn: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        session = self.sessions.get(peer)
        if session is not None:
            session.spawn(fn, *args)

    def notify(self, peer: str, message: dict[str, Any]) -> None:
        session = self.sessions.get(peer)
        if session is not None:
            session.spawn(session.send_quiet, message)

    def on_notice(self, message_type: str, callback: NoticeCallback) -> None:
        async def notice(session: PeerSession, msg: dict[str, Any]) -> None:
            await callback(session.peer_id, msg)

        self._control[message_type] = notice

    def on_peer_up(self, callback: PeerCallback) -> None:
        async def up(session: PeerSession) -> None:
            await callback(session.peer_id)

        self._on_session_up.append(up)

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

    def announce_soon(self) -> None:
        """Send every peer a fresh manifest now (this node's addresses changed)."""
        self._announce_event.set()

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

    # calling ----------------------------------------------------------------------
