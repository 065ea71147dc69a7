"""The community service on real buses over authenticated in-memory links: sync answers, invites."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Handler, Registration
from hearthnet.community import Level, decode_token
from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.events import Event, EventLog, EventRule, EventRules, pull, require_fields
from hearthnet.identity import Identity
from hearthnet.services.community import service as service_module
from hearthnet.services.community.service import SYNC_BATCH, SYNC_MAX_BYTES, CommunityService
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from hearthnet.wire.codec import pack
from hearthnet.wire.frames import DEFAULT_MAX_FRAME
from tests.polling import wait_until

FOUNDER = Identity.from_seed(b"f" * 32)
WRITER = Identity.from_seed(b"w" * 32)
JOINER = Identity.from_seed(b"j" * 32)
NEWBIE = Identity.from_seed(b"n" * 32)


def _validate_note(data: Mapping[str, Any]) -> None:
    require_fields(data, {"text": str})


def _rules() -> EventRules[Membership]:
    rules = default_rules()
    rules.register(EventRule("note.posted", Level.MEMBER, _validate_note))
    return rules


@dataclass
class Peer:
    identity: Identity
    log: EventLog[Membership]
    bus: CapabilityBus
    service: CommunityService | None


def _peer(
    identity: Identity,
    log: EventLog[Membership],
    *,
    addresses: Callable[[], list[str]] = lambda: ["127.0.0.1:7000"],
    level_of: Callable[[str], Level | None] | None = None,
    with_service: bool = True,
    served: list[int] | None = None,
    anti_entropy_seconds: float = service_module.ANTI_ENTROPY_SECONDS,
) -> Peer:
    bus = CapabilityBus(
        identity,
        level_of=level_of or (lambda n: log.view(lambda m: m.level_of(n))),
        community_id=lambda: log.community_id,
        name="n",
    )
    service = None
    if with_service:

        async def changed() -> None:
            return None

        service = CommunityService(
            identity=identity,
            bus=bus,
            event_log=log,
            addresses=addresses,
            on_membership_changed=changed,
            anti_entropy_seconds=anti_entropy_seconds,
        )
        for registration in service.registrations():
            if served is not None and registration.descriptor.name == "events.sync":
                registration = replace(registration, handler=_measured(registration.handler, served))
            bus.register(registration)
    return Peer(identity, log, bus, service)


def _measured(handler: Handler, sizes: list[int]) -> Handler:
    """``handler``, noting the encoded size of each answer."""

    async def measured(ctx: CallContext) -> dict[str, Any]:
        out = await handler(ctx)
        assert isinstance(out, dict)
        sizes.append(len(pack(out)))
        return out

    return measured


@asynccontextmanager
async def _linked(x: Peer, y: Peer) -> AsyncIterator[None]:
    """``x`` and ``y`` joined by one authenticated link, each holding the other's manifest."""
    community = x.log.community_id or ""
    x_end, y_end = memory_stream_pair()
    links: dict[str, Any] = {}

    async def respond() -> None:
        links["y"] = await accept_link(
            y_end, identity=y.identity, community_id=community, admit=lambda _p: None, remote_address="m"
        )

    async with anyio.create_task_group() as tg:
        async with anyio.create_task_group() as hs:
            hs.start_soon(respond)
            links["x"] = await initiate_link(
                x_end, identity=x.identity, community_id=community, admit=lambda _p: None, remote_address="m"
            )
        tg.start_soon(x.bus.attach, links["x"])
        tg.start_soon(y.bus.attach, links["y"])
        tg.start_soon(x.bus.run_announcer)
        tg.start_soon(y.bus.run_announcer)
        await wait_until(
            lambda: (
                y.identity.node_id in x.bus.registry.remote_nodes()
                and x.identity.node_id in y.bus.registry.remote_nodes()
            )
        )
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


def _founded(path: Path, *members: Identity) -> EventLog[Membership]:
    log = EventLog(path, rules=_rules())
    log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
    for member in members:
        log.append_local(FOUNDER, "member.invited", {"node_id": member.node_id, "level": "member"})
    return log


def _joined(path: Path, source: EventLog[Membership]) -> EventLog[Membership]:
    log = EventLog(path, rules=_rules())
    log.set_community(source.community_id or "")
    return log


@pytest.mark.anyio
async def test_big_events_arrive_in_answers_that_fit_a_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 events of 60 KB: one answer of them all would exceed the 1 MiB frame and never arrive."""
    verified_on: set[int] = set()
    parse = service_module._parse_events

    def recording(raw: Sequence[Any]) -> tuple[list[Event], int]:
        verified_on.add(threading.get_ident())
        return parse(raw)

    monkeypatch.setattr(service_module, "_parse_events", recording)
    with _founded(tmp_path / "f.db", WRITER, JOINER) as f_log, _joined(tmp_path / "j.db", f_log) as j_log:
        for _ in range(20):
            f_log.append_local(WRITER, "note.posted", {"text": "x" * 60_000})
        served: list[int] = []
        founder, joiner = _peer(FOUNDER, f_log, served=served), _peer(JOINER, j_log)
        async with _linked(joiner, founder):
            assert joiner.service is not None
            await joiner.service.pull_from(FOUNDER.node_id)
            await wait_until(lambda: j_log.count() == f_log.count(), timeout=20)
        assert j_log.replay() == f_log.replay()
        assert len(served) >= 5 and max(served) < SYNC_MAX_BYTES + 70_000 < DEFAULT_MAX_FRAME
        assert threading.get_ident() not in verified_on  # signatures were checked off the event loop


@pytest.mark.anyio
async def test_an_answer_longer_than_asked_is_refused_and_counted(tmp_path: Path) -> None:
    """A peer answering 201 events to a request for 200 gets none of them stored."""
    members = [Identity.generate() for _ in range(SYNC_BATCH)]
    with _founded(tmp_path / "s.db", *members) as source, _joined(tmp_path / "j.db", source) as j_log:
        offered = [e.to_wire() for e in source.replay()]
        assert len(offered) == SYNC_BATCH + 1
        hostile = _peer(FOUNDER, source, level_of=lambda _n: Level.MEMBER, with_service=False)

        async def too_many(ctx: CallContext) -> dict[str, Any]:
            return {"events": offered, "more": False}

        hostile.bus.register(
            Registration(CapabilityDescriptor("events.sync", (1, 0), idempotent=True), too_many)
        )
        joiner = _peer(JOINER, j_log)
        assert joiner.service is not None
        async with _linked(joiner, hostile):
            await joiner.service.pull_from(FOUNDER.node_id)
            await wait_until(lambda: joiner.service and joiner.service.rejected_by_peer.get(FOUNDER.node_id))
        assert joiner.service.rejected_by_peer[FOUNDER.node_id] == SYNC_BATCH + 1
        assert j_log.count() == 0


@pytest.mark.anyio
async def test_a_peer_that_never_answers_does_not_hold_up_the_others(tmp_path: Path) -> None:
    """The periodic round used to pull from one peer after the other: a peer stalling each
    events.sync to its 10 s deadline delayed what every other peer had to offer."""
    with _founded(tmp_path / "f.db", WRITER, JOINER) as f_log, _joined(tmp_path / "j.db", f_log) as j_log:
        pull(j_log, f_log.missing_for)
        stalled = anyio.Event()
        calls = 0

        async def never(ctx: CallContext) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls == 1:  # the pull when the link comes up; then every periodic pull hangs
                return {"events": [], "more": False}
            stalled.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        hostile = _peer(WRITER, f_log, with_service=False)
        hostile.bus.register(
            Registration(CapabilityDescriptor("events.sync", (1, 0), idempotent=True), never)
        )
        founder, joiner = _peer(FOUNDER, f_log), _peer(JOINER, j_log, anti_entropy_seconds=0.05)
        assert joiner.service is not None
        async with _linked(joiner, hostile), _linked(joiner, founder), anyio.create_task_group() as tg:
            assert list(joiner.bus.sessions) == [WRITER.node_id, FOUNDER.node_id]  # hostile first
            tg.start_soon(joiner.service.run)
            with anyio.fail_after(5):
                await stalled.wait()  # a round is stuck on the hostile peer
            f_log.append_local(FOUNDER, "member.invited", {"node_id": NEWBIE.node_id, "level": "member"})
            await wait_until(lambda: j_log.count() == f_log.count(), timeout=5)  # before the 10 s deadline
            tg.cancel_scope.cancel()
        assert j_log.replay() == f_log.replay()


@pytest.mark.anyio
async def test_invite_checks_the_token_before_it_appends(tmp_path: Path) -> None:
    """A token that cannot be made leaves no invite behind; IPv6 hosts go in brackets."""
    advertised = ["::1:7000"]
    with _founded(tmp_path / "f.db") as f_log:
        founder = _peer(FOUNDER, f_log, addresses=lambda: list(advertised))
        before = f_log.count()
        with pytest.raises(BadRequest, match="address"):
            await founder.bus.call(
                "community.invite", input={"node_id": NEWBIE.node_id, "addresses": ["no port here"]}
            )
        assert f_log.count() == before and f_log.membership().level_of(NEWBIE.node_id) is None
        out = (await founder.bus.call("community.invite", input={"node_id": NEWBIE.node_id})).output
        token = decode_token(out["token"])
        assert token.addresses == ["[::1]:7000"] and token.invite_event_id == out["event_id"]
        assert f_log.membership().level_of(NEWBIE.node_id) is Level.MEMBER and f_log.count() == before + 1


@pytest.mark.anyio
async def test_the_event_list_marks_events_that_had_no_effect(tmp_path: Path) -> None:
    from hearthnet.events import sign_event

    with _founded(tmp_path / "f.db", WRITER) as f_log:
        founder = _peer(FOUNDER, f_log)
        cid = f_log.community_id or ""
        # a note from a member is stored and replicated after its author was revoked, without effect
        f_log.append_local(FOUNDER, "member.revoked", {"node_id": WRITER.node_id, "reason": "left"})
        late = sign_event(
            WRITER,
            community_id=cid,
            event_type="note.posted",
            data={"text": "still here?"},
            lamport=f_log.lamport_clock + 1,
            seq=1,
        )
        assert f_log.ingest([late]).accepted == [late]
        listed = (await founder.bus.call("events.list")).output["events"]
        effective = {e["event_id"]: e["effective"] for e in listed}
        assert effective[late.event_id] is False
        assert sum(effective.values()) == len(listed) - 1


@pytest.mark.anyio
async def test_the_event_list_comes_in_pages_that_cover_the_log_once_in_replay_order(tmp_path: Path) -> None:
    """One answer of the whole log stops fitting the control frame once a community has
    ingested some tens of thousands of documents."""
    with _founded(tmp_path / "f.db", WRITER) as f_log:
        for i in range(23):
            f_log.append_local(WRITER, "note.posted", {"text": f"note {i}"})
        founder = _peer(FOUNDER, f_log)
        pages: list[list[str]] = []
        after: Any = None
        for _ in range(5):
            out = (await founder.bus.call("events.list", input={"limit": 10, "after": after})).output
            pages.append([e["event_id"] for e in out["events"]])
            after = out["next"]
            if after is None:
                break
        assert [len(p) for p in pages] == [10, 10, 5]
        assert [i for p in pages for i in p] == [e.event_id for e in f_log.replay()]
        whole = (await founder.bus.call("events.list")).output  # default page holds all 25
        assert len(whole["events"]) == 25 and whole["next"] is None
        bad_inputs = [{"limit": 0}, {"limit": True}, {"limit": 5001}, {"after": "x"}]
        bad_inputs.append({"after": {"lamport": 1}})
        for bad in bad_inputs:
            with pytest.raises(BadRequest):
                await founder.bus.call("events.list", input=bad)


def _typo(node_id: str) -> str:
    """``node_id`` with one character changed (still a well-formed id, of nobody here)."""
    i = len(node_id) // 2
    return node_id[:i] + ("A" if node_id[i] != "A" else "B") + node_id[i + 1 :]


@pytest.mark.anyio
async def test_revoke_and_promote_refuse_an_id_that_is_not_a_member(tmp_path: Path) -> None:
    """``member revoke <id with one character changed>`` answered "revoked": the real member
    stayed in and the mistyped id could never be invited (revocation is permanent)."""
    with _founded(tmp_path / "f.db", WRITER) as f_log:
        founder = _peer(FOUNDER, f_log)
        typo = _typo(WRITER.node_id)
        before = f_log.count()
        for capability, extra in (
            ("member.revoke", {"reason": "x"}),
            ("member.promote", {"level": "anchor"}),
        ):
            with pytest.raises(BadRequest, match=f"^{typo} is not a member of this community$"):
                await founder.bus.call(capability, input={"node_id": typo, **extra})
        with pytest.raises(BadRequest, match=f"^{typo} is not a member of this community$"):
            await founder.bus.call("member.demote", input={"node_id": typo, "level": "member"})
        assert f_log.count() == before and not f_log.membership().is_revoked(typo)
        assert f_log.membership().level_of(WRITER.node_id) is Level.MEMBER
        await founder.bus.call("community.invite", input={"node_id": typo})  # still invitable
        await founder.bus.call("member.revoke", input={"node_id": WRITER.node_id})
        with pytest.raises(BadRequest, match="is already revoked"):
            await founder.bus.call("member.revoke", input={"node_id": WRITER.node_id})


@pytest.mark.anyio
async def test_promote_only_raises_and_demote_only_lowers(tmp_path: Path) -> None:
    """``member promote C --level member`` demoted a trusted member."""
    with _founded(tmp_path / "f.db", WRITER) as f_log:
        founder = _peer(FOUNDER, f_log)
        w = WRITER.node_id
        out = (await founder.bus.call("member.promote", input={"node_id": w, "level": "trusted"})).output
        assert out["level"] == "trusted" and f_log.membership().level_of(w) is Level.TRUSTED
        before = f_log.count()
        with pytest.raises(BadRequest, match=f"run 'hearthnet member demote {w} --level member'"):
            await founder.bus.call("member.promote", input={"node_id": w, "level": "member"})
        with pytest.raises(BadRequest, match="is trusted already; 'member promote' only raises"):
            await founder.bus.call("member.promote", input={"node_id": w, "level": "trusted"})
        with pytest.raises(BadRequest, match=f"run 'hearthnet member promote {w} --level anchor'"):
            await founder.bus.call("member.demote", input={"node_id": w, "level": "anchor"})
        with pytest.raises(BadRequest, match=r"input\.level is required"):
            await founder.bus.call("member.demote", input={"node_id": w})
        with pytest.raises(Unauthorized, match="the founder stays an anchor"):
            await founder.bus.call("member.demote", input={"node_id": FOUNDER.node_id, "level": "trusted"})
        assert f_log.count() == before and f_log.membership().level_of(w) is Level.TRUSTED
        out = (await founder.bus.call("member.demote", input={"node_id": w, "level": "member"})).output
        assert out["level"] == "member" and f_log.membership().level_of(w) is Level.MEMBER
        assert [e.event_type for e in f_log.replay()][-1] == "member.demoted"
        with pytest.raises(BadRequest, match=f"run 'hearthnet member revoke {w}'"):
            await founder.bus.call("member.demote", input={"node_id": w, "level": "member"})


@pytest.mark.anyio
async def test_inviting_a_member_names_the_commands_that_change_a_level(tmp_path: Path) -> None:
    with _founded(tmp_path / "f.db", WRITER) as f_log:
        founder = _peer(FOUNDER, f_log)
        before = f_log.count()
        with pytest.raises(BadRequest) as info:
            await founder.bus.call("community.invite", input={"node_id": WRITER.node_id, "level": "trusted"})
        assert "is already a member (member)" in info.value.message
        assert f"'hearthnet member promote {WRITER.node_id} --level trusted'" in info.value.message
        assert "member.promoted" not in info.value.message  # no internal event names
        assert f_log.count() == before


@pytest.mark.anyio
async def test_a_member_that_never_joined_gets_a_fresh_token_at_its_level_and_no_new_event(
    tmp_path: Path,
) -> None:
    """QA row 18: a node invited but never joined (the token lost, or 'join' refused while its
    node ran) was told "already a member" and could never get a token again."""
    with _founded(tmp_path / "f.db", WRITER) as f_log:
        founder = _peer(FOUNDER, f_log)
        (admitted,) = f_log.events_of_type("member.invited")
        before = f_log.count()
        out = (await founder.bus.call("community.invite", input={"node_id": WRITER.node_id})).output
        assert out["reissued"] is True and out["event_id"] == admitted.event_id and out["level"] == "member"
        token = decode_token(out["token"])
        assert token.invitee == WRITER.node_id and token.level is Level.MEMBER
        assert token.invite_event_id == admitted.event_id and token.inviter == FOUNDER.node_id
        assert f_log.count() == before  # the invite that admitted it stands: nothing new signed
        fresh = (await founder.bus.call("community.invite", input={"node_id": NEWBIE.node_id})).output
        assert fresh["reissued"] is False and f_log.count() == before + 1
        await founder.bus.call("member.promote", input={"node_id": WRITER.node_id, "level": "anchor"})
        with pytest.raises(
            BadRequest, match=f"run 'hearthnet member demote {WRITER.node_id} --level trusted'"
        ):
            await founder.bus.call("community.invite", input={"node_id": WRITER.node_id, "level": "trusted"})
        again = await founder.bus.call(
            "community.invite", input={"node_id": WRITER.node_id, "level": "anchor"}
        )
        assert decode_token(again.output["token"]).level is Level.ANCHOR
        with pytest.raises(BadRequest, match="that is this node's own id"):
            await founder.bus.call("community.invite", input={"node_id": FOUNDER.node_id, "level": "anchor"})
        writer = _peer(WRITER, f_log)  # an anchor now: the founder needs no invite from it
        with pytest.raises(BadRequest, match="founded this community: it needs no invite"):
            await writer.bus.call("community.invite", input={"node_id": FOUNDER.node_id, "level": "anchor"})


@pytest.mark.anyio
async def test_a_node_without_the_right_hears_unauthorized_before_anything_else(tmp_path: Path) -> None:
    """A plain member typing a wrong id is told it lacks the right, not that the id is wrong."""
    with _founded(tmp_path / "f.db", WRITER) as f_log:
        writer = _peer(WRITER, f_log)
        before = f_log.count()
        for capability, extra in (
            ("member.revoke", {}),
            ("member.promote", {"level": "trusted"}),
            ("member.demote", {"level": "member"}),
        ):
            with pytest.raises(Unauthorized, match="needs level anchor; this node is member"):
                await writer.bus.call(capability, input={"node_id": _typo(FOUNDER.node_id), **extra})
        with pytest.raises(Unauthorized, match="needs level trusted; this node is member"):
            await writer.bus.call("community.invite", input={"node_id": NEWBIE.node_id})
        assert f_log.count() == before


@pytest.mark.anyio
async def test_events_appended_together_are_stored_in_order_and_told_once(tmp_path: Path) -> None:
    with _founded(tmp_path / "f.db") as f_log:
        founder = _peer(FOUNDER, f_log)
        assert founder.service is not None
        told: list[list[str]] = []
        founder.service.on_events(lambda events: told.append([e.data["text"] for e in events]))
        before = f_log.count()
        events = await founder.service.append_many("note.posted", [{"text": "a"}, {"text": "b"}])
        assert [e.data["text"] for e in events] == ["a", "b"] and events[0].lamport < events[1].lamport
        assert told == [["a", "b"]] and f_log.count() == before + 2  # one batch for the listeners
        with pytest.raises(BadRequest):  # the third is refused: the two before it stay
            await founder.service.append_many("note.posted", [{"text": "c"}, {"text": "d"}, {"text": 5}])
        assert told[-1] == ["c", "d"] and f_log.count() == before + 4
