"""Community membership and event gossip on the bus.

Capabilities:

- ``events.sync@1.0`` (member): ``input {vv, limit}`` (author -> highest
  contiguous seq the caller holds; at most ``limit`` events, 1..1000) ->
  ``output {events: [{body, sig}], more}``: the events the caller lacks, in
  batches bounded by count and by ``SYNC_MAX_BYTES``.  Exact, because it works
  on per-author sequence numbers rather than on "everything above a Lamport".
- ``events.list@1.0``, ``community.members@1.0``, ``community.invite@1.0``,
  ``member.promote@1.0``, ``member.demote@1.0``, ``member.revoke@1.0`` (this node only:
  the CLI's local control channel and the web UI).  Promote only raises a current member's level, demote only
  lowers it, revoke only removes a current member (:mod:`.members`).

A node learns its own revocation from its log (gossip brought the event) or from
a peer that refuses its handshake and shows it the signed event
(:meth:`CommunityService.learn_revocation`); a shown revocation that the log cannot
store (it lacks the author's earlier events) is kept in ``revoked.json`` in the home.

Gossip: whenever a node stores new events it sends ``events_changed`` to every
connected peer, and each peer pulls from it; on every new link both sides pull;
and every ``ANTI_ENTROPY_SECONDS`` each node pulls from every peer.  Invalid
events are rejected, never stored, and counted per peer; so is every event of
an answer longer than asked for.  Signatures are checked in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import structlog

from hearthnet.bus.api import PeerBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community.invite import InviteToken, encode_token, validate_token
from hearthnet.community.levels import Level
from hearthnet.community.membership import Membership, Revocation
from hearthnet.contracts.levels import trust_required
from hearthnet.errors import BadRequest, BusError
from hearthnet.events.envelope import Event
from hearthnet.events.gossip import parse_version_vector, refused_authors, with_skipped
from hearthnet.events.log import NO_COMMUNITY, EventLog
from hearthnet.events.ulid import new_ulid
from hearthnet.identity import Identity, public_key_from_node_id
from hearthnet.services.community import members
from hearthnet.services.community.notice import OwnRevocation

log = structlog.get_logger("hearthnet.community")

ANTI_ENTROPY_SECONDS = 10.0
SYNC_BATCH = 200
SYNC_MAX_BYTES = 256 * 1024
"""Encoded events per ``events.sync`` answer: a quarter of the 1 MiB frame; one event always fits."""
INVITE_TTL_MS = 7 * 24 * 3600 * 1000
LIST_PAGE = 1000
"""Events per ``events.list`` page unless the caller asks for fewer or more."""
LIST_MAX = 5000
"""Most events one page may hold (~3 MB as JSON-ready maps; the control frame takes 16 MiB)."""

MembershipChanged = Callable[[], Awaitable[None]]
EventsStored = Callable[[Sequence[Event]], None]
"""Told of events newly stored in the log (appended here or pulled from a peer), in replay order."""


class CommunityService:
    name = "community"

    def __init__(
        self,
        *,
        identity: Identity,
        bus: PeerBus,
        event_log: EventLog[Membership],
        addresses: Callable[[], list[str]],
        on_membership_changed: MembershipChanged,
        anti_entropy_seconds: float = ANTI_ENTROPY_SECONDS,
        revocation_path: Path | None = None,
    ) -> None:
        self._identity = identity
        self._revocation = OwnRevocation(identity.node_id, event_log, revocation_path)
        self._anti_entropy_seconds = anti_entropy_seconds
        self._bus = bus
        self._log = event_log
        self._addresses = addresses
        self._on_membership_changed = on_membership_changed
        self._limiter = anyio.CapacityLimiter(1)
        self._verify_limiter = anyio.CapacityLimiter(1)
        self._pull_locks: dict[str, anyio.Lock] = {}
        self._pull_again: set[str] = set()
        self.rejected_by_peer: dict[str, int] = {}
        self.accepted_by_peer: dict[str, int] = {}
        self._on_stored: list[EventsStored] = []
        bus.on_notice("events_changed", self._on_events_changed)
        bus.on_peer_up(self._on_peer_up)

    # Service protocol ------------------------------------------------------------
    def registrations(self) -> list[Registration]:
        def desc(name: str, **kw: Any) -> CapabilityDescriptor:
            return CapabilityDescriptor(
                name, (1, 0), timeout_seconds=10.0, trust_required=trust_required(name), **kw
            )

        return [
            Registration(desc("events.sync", idempotent=True, max_concurrent=16), self._handle_sync),
            Registration(desc("events.list", idempotent=True, local_only=True), self._handle_list),
            Registration(desc("community.members", idempotent=True, local_only=True), self._handle_members),
            Registration(desc("community.invite", local_only=True), self._handle_invite),
            Registration(desc("member.promote", local_only=True), self._handle_promote),
            Registration(desc("member.demote", local_only=True), self._handle_demote),
            Registration(desc("member.revoke", local_only=True), self._handle_revoke),
        ]

    async def start(self) -> None:
        await anyio.to_thread.run_sync(self._revocation.load, limiter=self._limiter)

    async def stop(self) -> None:
        return None

    # this node's own revocation --------------------------------------------------------
    def own_revocation(self) -> Revocation | None:
        """This node's revocation: the log's when it holds it, else the one a refusing peer showed."""
        return self._revocation.current()

    async def learn_revocation(self, peer: str, evidence: dict[str, Any]) -> bool:
        """Check the revocation ``peer`` showed when it refused us; keep it if it is ours.

        True when this node did not know it was revoked and now does.  Anything else
        (another node's revocation, a forgery, an author not known as an anchor) is
        logged and ignored.
        """
        try:
            event = await anyio.to_thread.run_sync(Event.from_wire, evidence, limiter=self._verify_limiter)
            learned = await anyio.to_thread.run_sync(self._revocation.learn, event, limiter=self._limiter)
        except BusError as exc:
            log.warning("revocation_shown_refused", peer=peer, code=exc.code, reason=exc.message)
            return False
        if learned:
            log.warning("this_node_revoked", by=event.author, event_id=event.event_id, peer=peer)
        return learned

    def health(self) -> dict[str, Any]:
        return {
            "events": self._log.count(),
            "rejected_by_peer": dict(self.rejected_by_peer),
            "accepted_by_peer": dict(self.accepted_by_peer),
        }

    async def run_anti_entropy(self) -> None:
        """Every ``anti_entropy_seconds``, start a pull from every connected peer.

        Each pull runs in its peer's session, so a peer that answers slowly (or
        not at all, until the call's deadline) holds up only its own pull, not
        the round's pulls from the others; a pull still running is not doubled
        (:meth:`pull_from` coalesces).
        """
        while True:
            await anyio.sleep(self._anti_entropy_seconds)
            for peer in self._bus.connected():
                self._bus.spawn_for(peer, self.pull_from, peer)

    def on_events(self, callback: EventsStored) -> None:
        """Call ``callback`` with every batch of events newly stored (e.g. to drop cached answers)."""
        self._on_stored.append(callback)

    def _stored(self, events: Sequence[Event]) -> None:
        for callback in self._on_stored:
            try:
                callback(events)
            except Exception:  # a listener's bug must not fail the append or the pull
                log.exception("events_listener_failed", events=len(events))

    # local writes -------------------------------------------------------------------
    async def append(self, event_type: str, data: dict[str, Any]) -> Event:
        """Append a signed event authored by this node and tell every peer."""
        event = await anyio.to_thread.run_sync(
            self._log.append_local, self._identity, event_type, data, limiter=self._limiter
        )
        log.info("event_appended", event_type=event_type, event_id=event.event_id, lamport=event.lamport)
        self._stored([event])
        if event_type.startswith(("member.", "community.")):
            await self._on_membership_changed()
        await self.broadcast_changed()
        return event

    async def append_many(self, event_type: str, items: list[dict[str, Any]]) -> list[Event]:
        """Append several signed events of one type in order (one worker pass), telling the peers once.

        Each is checked and stored as :meth:`append` does; if one is refused, those before it stay
        appended (and are announced) and its error is raised.
        """

        def append_all() -> tuple[list[Event], BaseException | None]:
            done: list[Event] = []
            for data in items:
                try:
                    done.append(self._log.append_local(self._identity, event_type, data))
                except Exception as exc:
                    return done, exc
            return done, None

        events, error = await anyio.to_thread.run_sync(append_all, limiter=self._limiter)
        for event in events:
            log.info("event_appended", event_type=event_type, event_id=event.event_id, lamport=event.lamport)
        if events:
            self._stored(events)
            if event_type.startswith(("member.", "community.")):
                await self._on_membership_changed()
            await self.broadcast_changed()
        if error is not None:
            raise error
        return events

    async def broadcast_changed(self) -> None:
        for peer in self._bus.connected():
            # in the link's own tasks: a peer that stopped reading holds up only itself
            self._bus.notify(peer, {"t": "events_changed"})

    # gossip -------------------------------------------------------------------------
    async def _on_events_changed(self, peer: str, msg: dict[str, Any]) -> None:
        # Never pull inside the link's reader task: it would wait on its own link.
        self._bus.spawn_for(peer, self.pull_from, peer)

    async def _on_peer_up(self, peer: str) -> None:
        await self.pull_from(peer)

    async def run(self) -> None:
        """The periodic anti-entropy round (pulls on notification run in each link's task group)."""
        await self.run_anti_entropy()

    async def pull_from(self, peer: str) -> int:
        """Pull everything ``peer`` has that we lack; returns how many events were accepted."""
        lock = self._pull_locks.setdefault(peer, anyio.Lock())
        if lock.locked():
            self._pull_again.add(peer)  # coalesce: the running pull goes round once more
            return 0
        accepted_total = 0
        async with lock:
            while True:
                self._pull_again.discard(peer)
                try:
                    accepted_total += await self._pull_batches(peer)
                except BusError as exc:
                    log.info("gossip_pull_failed", peer=peer, code=exc.code)
                    return accepted_total
                if peer not in self._pull_again:
                    break
        if accepted_total:
            await self.broadcast_changed()
        return accepted_total

    async def _pull_batches(self, peer: str) -> int:
        accepted_total = 0
        membership_before = await self._snapshot()
        skip: set[str] = set()  # authors whose events we refuse: ask for no more of them (see gossip.pull)
        for _ in range(10_000):
            vv = with_skipped(
                await anyio.to_thread.run_sync(self._log.version_vector, limiter=self._limiter), skip
            )
            result = await self._bus.call(
                "events.sync", (1, 0), input={"vv": vv, "limit": SYNC_BATCH}, provider=peer, timeout=10.0
            )
            raw = result.output.get("events")
            if not isinstance(raw, list):
                raise BadRequest("events.sync answered without an events list")
            if len(raw) > SYNC_BATCH:
                self.rejected_by_peer[peer] = self.rejected_by_peer.get(peer, 0) + len(raw)
                raise BadRequest(f"events.sync answered {len(raw)} events; {SYNC_BATCH} were asked for")
            events, bad = await anyio.to_thread.run_sync(_parse_events, raw, limiter=self._verify_limiter)
            report = await anyio.to_thread.run_sync(self._log.ingest, events, limiter=self._limiter)
            rejected = bad + len(report.rejected)
            if rejected:
                self.rejected_by_peer[peer] = self.rejected_by_peer.get(peer, 0) + rejected
                for event_id, code, reason in report.rejected[:5]:
                    log.warning("event_rejected", peer=peer, event_id=event_id, code=code, reason=reason)
            accepted_total += len(report.accepted)
            if report.accepted:
                self._stored(report.accepted)
            self.accepted_by_peer[peer] = self.accepted_by_peer.get(peer, 0) + len(report.accepted)
            new = refused_authors(events, report) - skip
            skip |= new
            if not result.output.get("more") or (not report.accepted and not new):
                break
        if await self._snapshot() != membership_before:
            await self._on_membership_changed()
        return accepted_total

    async def _snapshot(self) -> tuple[object, ...]:
        return await anyio.to_thread.run_sync(
            lambda: self._log.membership().snapshot(), limiter=self._limiter
        )

    def _community_name(self) -> str:
        return self._log.membership().name or ""

    # handlers -----------------------------------------------------------------------
    async def _handle_sync(self, ctx: CallContext) -> dict[str, Any]:
        vv = parse_version_vector(ctx.input.get("vv", {}))
        limit = _limit(ctx.input.get("limit", SYNC_BATCH), 1000)
        events, more = await anyio.to_thread.run_sync(
            lambda: self._log.missing_batch(vv, limit=limit, max_bytes=SYNC_MAX_BYTES), limiter=self._limiter
        )
        return {"events": [e.to_wire() for e in events], "more": more}

    async def _handle_list(self, ctx: CallContext) -> dict[str, Any]:
        """One page of the log in replay order: ``{events, next}``; pass ``next`` back as ``after``."""
        limit = _limit(ctx.input.get("limit", LIST_PAGE), LIST_MAX)
        after = _list_cursor(ctx.input.get("after"))

        def listing() -> dict[str, Any]:
            events = self._log.replay_page(after, limit + 1)
            more = len(events) > limit
            events = events[:limit]
            membership = self._log.membership()
            last = events[-1] if more else None
            return {
                # `effective` false: stored and replicated, but its author lacked the right
                # at its place (e.g. an invite backdated by a revoked anchor)
                "events": [{**e.to_json(), "effective": membership.is_effective(e.event_id)} for e in events],
                "next": None if last is None else {"lamport": last.lamport, "event_id": last.event_id},
            }

        out: dict[str, Any] = await anyio.to_thread.run_sync(listing, limiter=self._limiter)
        return out

    async def _handle_members(self, ctx: CallContext) -> dict[str, Any]:
        """The community as this node's log derives it: current members with their level, and
        the revoked ones."""

        def listing() -> dict[str, Any]:
            membership = self._log.membership()
            return {
                "community_id": self._log.community_id,
                "name": membership.name,
                "founder": membership.founder,
                "members": [
                    {"node_id": m.node_id, "level": m.level.label, "invited_by": m.invited_by}
                    for m in sorted(membership.members().values(), key=lambda m: m.since_lamport)
                ],
                "revoked": sorted(membership.revoked()),
            }

        out: dict[str, Any] = await anyio.to_thread.run_sync(listing, limiter=self._limiter)
        return out

    async def _handle_invite(self, ctx: CallContext) -> dict[str, Any]:
        node_id = _node_id_input(ctx.input)
        level = Level.parse(str(ctx.input.get("level", "member")))
        community = self._log.community_id
        if community is None:
            raise BadRequest(NO_COMMUNITY)
        reissue = members.check_invite(await self._standing(node_id), level)
        addresses = ctx.input.get("addresses") or self._addresses()
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise BadRequest("input.addresses must be a list of 'host:port' strings")
        # Everything the token needs is checked before the invite is appended: a token that
        # cannot be built must not leave a committed invite behind.  The id is a stand-in.
        draft = InviteToken(
            community_id=community,
            community_name=await anyio.to_thread.run_sync(self._community_name, limiter=self._limiter),
            inviter=self._identity.node_id,
            addresses=[token_address(a) for a in addresses],
            invitee=node_id,
            level=level,
            invite_event_id=new_ulid(),
            expires_at=int(time.time() * 1000) + INVITE_TTL_MS,
        )
        validate_token(draft)
        if reissue:  # a member already: its invite stands, only the token is new
            event_id = await anyio.to_thread.run_sync(self._admission, node_id, limiter=self._limiter)
        else:
            event_id = (
                await self.append("member.invited", {"node_id": node_id, "level": level.label})
            ).event_id
        token = replace(draft, invite_event_id=event_id)
        return {
            "token": encode_token(token, self._identity),
            "event_id": event_id,
            "level": level.label,
            "reissued": reissue,
        }

    def _admission(self, node_id: str) -> str:
        """The id of the invite that made ``node_id`` a member (the last effective one)."""
        invites = [
            e
            for e in self._log.events_of_type("member.invited", effective_only=True)
            if e.data["node_id"] == node_id
        ]
        if not invites:
            raise BadRequest(f"{node_id} is a member, but this node's log holds no invite of it")
        return invites[-1].event_id

    async def _standing(self, node_id: str) -> members.Standing:
        """This node's and ``node_id``'s place in the community, for the checks of :mod:`.members`."""
        if self._log.community_id is None:
            raise BadRequest(NO_COMMUNITY)
        own = self._identity.node_id
        return await anyio.to_thread.run_sync(
            lambda: members.standing(self._log.membership(), own, node_id), limiter=self._limiter
        )

    async def _handle_promote(self, ctx: CallContext) -> dict[str, Any]:
        node_id = _node_id_input(ctx.input)
        level = Level.parse(str(ctx.input.get("level", "trusted")))
        members.check_promote(await self._standing(node_id), level)
        event = await self.append("member.promoted", {"node_id": node_id, "level": level.label})
        return {"event_id": event.event_id, "node_id": node_id, "level": level.label}

    async def _handle_demote(self, ctx: CallContext) -> dict[str, Any]:
        node_id = _node_id_input(ctx.input)
        if "level" not in ctx.input:
            raise BadRequest("input.level is required: the level to lower the member to (member or trusted)")
        level = Level.parse(str(ctx.input["level"]))
        members.check_demote(await self._standing(node_id), level)
        event = await self.append("member.demoted", {"node_id": node_id, "level": level.label})
        return {"event_id": event.event_id, "node_id": node_id, "level": level.label}

    async def _handle_revoke(self, ctx: CallContext) -> dict[str, Any]:
        node_id = _node_id_input(ctx.input)
        reason = str(ctx.input.get("reason", ""))[:200]
        members.check_revoke(await self._standing(node_id))
        event = await self.append("member.revoked", {"node_id": node_id, "reason": reason})
        return {"event_id": event.event_id, "node_id": node_id}


def token_address(address: str) -> str:
    """``host:port`` as a token carries it: an IPv6 host goes in brackets (``[::1]:7000``)."""
    host, sep, port = address.rpartition(":")
    if sep and ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return address


def _limit(value: Any, most: int) -> int:
    """A caller's ``limit``: an integer from 1 to ``most``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise BadRequest(f"limit must be an integer from 1 to {most}")
    return value


def _list_cursor(value: Any) -> tuple[int, str] | None:
    """``events.list``'s ``after``: absent, or the ``next`` of the previous page."""
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or type(value.get("lamport")) is not int
        or not isinstance(value.get("event_id"), str)
        or len(value["event_id"]) > 64
    ):
        raise BadRequest("after must be the 'next' of the previous page: {lamport: int, event_id: str}")
    return int(value["lamport"]), str(value["event_id"])


def _node_id_input(inp: dict[str, Any]) -> str:
    node_id = inp.get("node_id")
    if not isinstance(node_id, str):
        raise BadRequest("input.node_id is required")
    public_key_from_node_id(node_id)
    return node_id


def _parse_events(raw: Sequence[Any]) -> tuple[list[Event], int]:
    events: list[Event] = []
    bad = 0
    for item in raw:
        if not isinstance(item, dict):
            bad += 1
            continue
        try:
            events.append(Event.from_wire(item))
        except BusError:
            bad += 1
    return events, bad
