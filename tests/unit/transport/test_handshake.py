"""The link handshake over in-memory streams: who is admitted, and what is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import msgpack
import pytest

import hearthnet.transport
from hearthnet.errors import (
    BusError,
    InvalidSignature,
    Partition,
    ProtocolError,
    Revoked,
    Timeout,
    Unauthorized,
)
from hearthnet.identity.keys import Identity, verify_signature
from hearthnet.transport.handshake import (
    PROTOCOL_VERSION,
    ROLE_INITIATOR,
    ROLE_RESPONDER,
    InitiatorHandshake,
    ResponderHandshake,
    transcript_digest,
)
from hearthnet.transport.link import Admit, Link, accept_link, initiate_link
from hearthnet.transport.memory import memory_stream_pair
from hearthnet.wire.codec import pack, unpack_map
from hearthnet.wire.frames import FrameDecoder, encode_batch, encode_frame

COMMUNITY = "ed25519:community-founder"


def allow(peer: str) -> None:
    return None


def refuse_with(error: BusError) -> Admit:
    def admit(peer: str) -> None:
        raise error

    return admit


async def handshake(
    initiator: Identity,
    responder: Identity,
    *,
    initiator_community: str = COMMUNITY,
    responder_community: str = COMMUNITY,
    initiator_admit: Admit = allow,
    responder_admit: Admit = allow,
    expected_peer: str | None = None,
) -> tuple[Link | BaseException, Link | BaseException]:
    """Run both sides concurrently; return what each produced (a link or its error)."""
    a, b = memory_stream_pair()
    out: dict[str, Link | BaseException] = {}

    async def respond() -> None:
        try:
            out["r"] = await accept_link(
                b,
                identity=responder,
                community_id=responder_community,
                admit=responder_admit,
                remote_address="mem",
            )
        except BusError as exc:
            out["r"] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(respond)
        try:
            out["i"] = await initiate_link(
                a,
                identity=initiator,
                community_id=initiator_community,
                admit=initiator_admit,
                remote_address="mem",
                expected_peer=expected_peer,
            )
        except BusError as exc:
            out["i"] = exc
    return out["i"], out["r"]


class RawPeer:
    """The far end of a stream, driven frame by frame by a test."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: list[bytes] = []

    async def send(self, payload: bytes) -> None:
        await self.stream.send(encode_frame(payload))

    async def receive(self) -> bytes:
        while not self.frames:
            self.frames.extend(self.decoder.feed(await self.stream.receive()))
        return self.frames.pop(0)


@asynccontextmanager
async def responder_under_test(
    identity: Identity, admit: Admit = allow
) -> AsyncIterator[tuple[RawPeer, dict[str, Any]]]:
    """A real ``accept_link`` on one end, a :class:`RawPeer` on the other."""
    a, b = memory_stream_pair()
    result: dict[str, Any] = {}

    async def respond() -> None:
        try:
            result["link"] = await accept_link(
                b,
                identity=identity,
                community_id=COMMUNITY,
                admit=admit,
                remote_address="mem",
                handshake_timeout=5,
            )
        except BusError as exc:
            result["error"] = exc

    async with a, anyio.create_task_group() as tg:
        tg.start_soon(respond)
        yield RawPeer(a), result


# -- success ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mutual_success_and_messages_flow_both_ways() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    seen: list[str] = []
    ia, rb = await handshake(alice, bob, initiator_admit=seen.append, responder_admit=seen.append)
    assert isinstance(ia, Link) and isinstance(rb, Link)
    assert seen == [bob.node_id, alice.node_id]
    assert (ia.peer_id, ia.local_id, ia.initiator) == (bob.node_id, alice.node_id, True)
    assert (rb.peer_id, rb.local_id, rb.initiator) == (alice.node_id, bob.node_id, False)
    await ia.send({"n": 1, "blob": b"\x00" * 10})
    assert await rb.receive() == {"n": 1, "blob": b"\x00" * 10}
    await rb.send({"n": 2})
    assert await ia.receive() == {"n": 2}
    await ia.aclose()
    await ia.aclose()  # idempotent
    assert ia.closed
    with pytest.raises(anyio.EndOfStream):
        await rb.receive()
    with pytest.raises(Partition):
        await ia.send({"n": 3})
    await rb.aclose()


@pytest.mark.anyio
async def test_expected_peer_match_succeeds() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    ia, rb = await handshake(alice, bob, expected_peer=bob.node_id)
    assert isinstance(ia, Link) and isinstance(rb, Link)
    await ia.aclose()
    await rb.aclose()


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_responder_refuses_non_admitted_key_on_both_sides() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    ia, rb = await handshake(alice, bob, responder_admit=refuse_with(Unauthorized("not a member")))
    assert isinstance(ia, Unauthorized) and "not a member" in ia.message
    assert isinstance(rb, Unauthorized)


@pytest.mark.anyio
async def test_revocation_is_reported_as_revoked() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    ia, rb = await handshake(alice, bob, responder_admit=refuse_with(Revoked("revoked at lamport 7")))
    assert isinstance(ia, Revoked)
    assert isinstance(rb, Revoked)


EVIDENCE = {"body": b"\x81\xa1k\xa1v" + b"r" * 4000, "sig": b"s" * 64}


@pytest.mark.anyio
async def test_a_revoked_peer_is_shown_its_revocation_in_the_refusal() -> None:
    """The refusal used to say only "revoked": the revoked node could not learn by whom or when.
    It now carries the signed event, on either side of the handshake, after the key is proven."""
    alice, bob = Identity.generate(), Identity.generate()
    shown = Revoked("alice was revoked", evidence=EVIDENCE)
    ia, rb = await handshake(alice, bob, responder_admit=refuse_with(shown))
    assert isinstance(ia, Revoked) and ia.evidence == EVIDENCE and "alice was revoked" in ia.message
    assert isinstance(rb, Revoked)
    ia, rb = await handshake(alice, bob, initiator_admit=refuse_with(shown))
    assert isinstance(rb, Revoked) and rb.evidence == EVIDENCE  # the responder decodes it too
    # anything else refuses with {error, message} only
    ia, _ = await handshake(alice, bob, responder_admit=refuse_with(Unauthorized("not a member")))
    assert isinstance(ia, Unauthorized) and not hasattr(ia, "evidence")
    ia, _ = await handshake(alice, bob, responder_admit=refuse_with(Revoked("no event")))
    assert isinstance(ia, Revoked) and ia.evidence is None


def test_a_refusal_carries_an_event_only_as_revoked_and_well_formed() -> None:
    from hearthnet.transport.handshake import MAX_EVIDENCE_BYTES, raise_if_refusal, refusal_map

    assert set(refusal_map(Revoked("r", evidence=EVIDENCE))) == {"error", "message", "event"}
    assert set(refusal_map(Unauthorized("u"))) == {"error", "message"}
    huge = {"body": b"x" * MAX_EVIDENCE_BYTES, "sig": b"s" * 64}
    assert "event" not in refusal_map(Revoked("r", evidence=huge))  # never a frame too big to read
    for bad in (
        {"error": "unauthorized", "message": "m", "event": EVIDENCE},
        {"error": "revoked", "message": "m", "event": {"body": "text", "sig": b"s"}},
        {"error": "revoked", "message": "m", "event": {"body": b"b"}},
        {"error": "revoked", "message": "m", "event": [b"b", b"s"]},
    ):
        with pytest.raises(ProtocolError):
            raise_if_refusal(bad)


@pytest.mark.anyio
async def test_initiator_refuses_non_admitted_responder() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    ia, rb = await handshake(alice, bob, initiator_admit=refuse_with(Unauthorized("who are you")))
    assert isinstance(ia, Unauthorized)
    assert isinstance(rb, Unauthorized)  # told so in plaintext, no link either way


@pytest.mark.anyio
async def test_wrong_community_is_refused() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    ia, rb = await handshake(alice, bob, initiator_community="ed25519:another-community")
    assert isinstance(ia, Unauthorized)
    assert isinstance(rb, Unauthorized)


@pytest.mark.anyio
async def test_self_connect_is_refused() -> None:
    me = Identity.generate()
    ia, rb = await handshake(me, me)
    assert isinstance(ia, Unauthorized)
    assert isinstance(rb, Unauthorized)


@pytest.mark.anyio
async def test_expected_peer_mismatch_is_refused() -> None:
    alice, bob, carol = Identity.generate(), Identity.generate(), Identity.generate()
    ia, rb = await handshake(alice, bob, expected_peer=carol.node_id)
    assert isinstance(ia, Unauthorized) and carol.node_id in ia.message
    assert not isinstance(rb, Link)


@pytest.mark.anyio
async def test_silent_responder_times_out() -> None:
    a, b = memory_stream_pair()
    async with b:
        with pytest.raises(Timeout):
            await initiate_link(
                a, identity=Identity.generate(), community_id=COMMUNITY, admit=allow, remote_address="m",
                handshake_timeout=0.05,
            )  # fmt: skip


@pytest.mark.anyio
async def test_responder_closing_mid_handshake_is_partition() -> None:
    a, b = memory_stream_pair()
    await b.aclose()
    with pytest.raises(Partition):
        await initiate_link(
            a, identity=Identity.generate(), community_id=COMMUNITY, admit=allow, remote_address="m"
        )


# -- attacks on the transcript ---------------------------------------------------------------------


def hello_fields(identity: Identity, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = unpack_map(InitiatorHandshake(identity, COMMUNITY).hello)
    fields.update(overrides)
    return fields


@pytest.mark.parametrize(
    "mutate",
    [
        lambda f: f.update(v=PROTOCOL_VERSION + 1),
        lambda f: f.update(v=1),  # one message per sealed frame: the peer would misread ours
        lambda f: f.update(v=True),
        lambda f: f.update(eph=f["eph"][:31]),
        lambda f: f.update(nonce="x" * 32),
        lambda f: f.update(node_id="ed25519:not-a-key"),
        lambda f: f.update(community_id=""),
        lambda f: f.update(extra=1),
        lambda f: f.pop("nonce"),
    ],
    ids=[
        "version",
        "version-1",
        "bool-version",
        "short-eph",
        "str-nonce",
        "bad-node-id",
        "empty-community",
        "extra",
        "missing",
    ],
)
@pytest.mark.anyio
async def test_malformed_hello_is_refused(mutate: Callable[[dict[str, Any]], None]) -> None:
    fields = hello_fields(Identity.generate())
    mutate(fields)
    async with responder_under_test(Identity.generate()) as (peer, result):
        await peer.send(pack(fields))
        refusal = unpack_map(await peer.receive())
    assert refusal["error"] == "bad_request"
    assert isinstance(result["error"], ProtocolError)


@pytest.mark.anyio
async def test_garbage_instead_of_hello_is_refused() -> None:
    async with responder_under_test(Identity.generate()) as (peer, result):
        await peer.send(msgpack.packb([1, 2, 3]))
    assert isinstance(result["error"], ProtocolError)


def test_role_labels_separate_the_two_signatures() -> None:
    bob = Identity.generate()
    sig = bob.sign(transcript_digest(ROLE_RESPONDER, b"m1", b"m2"))
    verify_signature(bob.node_id, transcript_digest(ROLE_RESPONDER, b"m1", b"m2"), sig)
    with pytest.raises(InvalidSignature):
        verify_signature(bob.node_id, transcript_digest(ROLE_INITIATOR, b"m1", b"m2"), sig)


@pytest.mark.anyio
async def test_reflected_responder_signature_is_refused_as_auth() -> None:
    """Mallory gets Bob to sign as responder, then offers that signature as Bob's auth to Carol."""
    bob, carol, mallory = Identity.generate(), Identity.generate(), Identity.generate()
    # Mallory talks to Bob as herself and collects his responder signature.
    bob_side = ResponderHandshake(bob, COMMUNITY)
    mallory_hs = InitiatorHandshake(mallory, COMMUNITY)
    bob_side.read_hello(mallory_hs.hello)
    bob_sig = unpack_map(bob_side.hello())["sig"]
    # Now Mallory claims to be Bob towards Carol and reflects his signature.
    claim = hello_fields(mallory, node_id=bob.node_id)
    async with responder_under_test(carol) as (peer, result):
        await peer.send(pack(claim))
        await peer.receive()  # Carol's hello
        await peer.send(pack({"auth": bob_sig}))
        refusal = unpack_map(await peer.receive())
    assert refusal["error"] == "invalid_signature"
    assert isinstance(result["error"], InvalidSignature)
    assert "link" not in result


@pytest.mark.anyio
async def test_replayed_handshake_recording_yields_no_session() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    # Record an honest handshake (the bytes Alice sent).
    alice_hs, bob_hs = InitiatorHandshake(alice, COMMUNITY), ResponderHandshake(bob, COMMUNITY)
    bob_hs.read_hello(alice_hs.hello)
    alice_hs.read_hello(bob_hs.hello())
    recorded = [alice_hs.hello, alice_hs.auth()]
    bob_hs.read_auth(recorded[1])  # it was valid the first time
    # Replay Alice's bytes to a fresh Bob: his new ephemeral key and nonce break the old signature.
    async with responder_under_test(bob) as (peer, result):
        await peer.send(recorded[0])
        await peer.receive()
        await peer.send(recorded[1])
        refusal = unpack_map(await peer.receive())
    assert refusal["error"] == "invalid_signature"
    assert isinstance(result["error"], InvalidSignature)
    assert "link" not in result


def test_signature_covers_exact_bytes_of_the_hello() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    alice_hs, bob_hs = InitiatorHandshake(alice, COMMUNITY), ResponderHandshake(bob, COMMUNITY)
    bob_hs.read_hello(alice_hs.hello)
    msg2 = unpack_map(bob_hs.hello())
    body = unpack_map(msg2["hello"])
    # Same fields, different encoding (keys reordered): the signature no longer covers it.
    reordered = msgpack.packb(dict(reversed(list(body.items()))), use_bin_type=True)
    assert reordered != msg2["hello"]
    with pytest.raises(InvalidSignature):
        alice_hs.read_hello(pack({"hello": reordered, "sig": msg2["sig"]}))


def test_both_sides_derive_matching_direction_keys() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    alice_hs, bob_hs = InitiatorHandshake(alice, COMMUNITY), ResponderHandshake(bob, COMMUNITY)
    bob_hs.read_hello(alice_hs.hello)
    assert alice_hs.read_hello(bob_hs.hello()) == bob.node_id
    assert bob_hs.read_auth(alice_hs.auth()) == alice.node_id
    ka, kb = alice_hs.session_keys(), bob_hs.session_keys()
    assert ka.send_key == kb.recv_key and ka.recv_key == kb.send_key
    assert ka.send_key != ka.recv_key
    assert ka.transcript_hash == kb.transcript_hash


def test_degenerate_ephemeral_key_is_refused() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    bob_hs = ResponderHandshake(bob, COMMUNITY)
    msg1 = pack(hello_fields(alice, eph=bytes(32)))  # the all-zero point: shared secret would be zero
    bob_hs.read_hello(msg1)
    msg2 = bob_hs.hello()
    bob_hs.read_auth(pack({"auth": alice.sign(transcript_digest(ROLE_INITIATOR, msg1, msg2))}))
    with pytest.raises(ProtocolError):
        bob_hs.session_keys()


# -- the established link in memory ----------------------------------------------------------------


async def relay(
    src: anyio.abc.ByteStream, dst: anyio.abc.ByteStream, transform: Callable[[bytes], bytes]
) -> None:
    try:
        while True:
            await dst.send(transform(await src.receive()))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await dst.aclose()


@asynccontextmanager
async def relayed_links(
    to_responder: Callable[[bytes], bytes],
) -> AsyncIterator[tuple[Link, Link]]:
    """Alice -> relay -> Bob, where the relay can tamper with bytes going to Bob."""
    alice, bob = Identity.generate(), Identity.generate()
    a_end, relay_a = memory_stream_pair()
    relay_b, b_end = memory_stream_pair()
    async with anyio.create_task_group() as tg:
        tg.start_soon(relay, relay_a, relay_b, to_responder)
        tg.start_soon(relay, relay_b, relay_a, lambda d: d)
        out: dict[str, Link] = {}

        async def respond() -> None:
            out["bob"] = await accept_link(
                b_end, identity=bob, community_id=COMMUNITY, admit=allow, remote_address="m"
            )

        async with anyio.create_task_group() as hs:
            hs.start_soon(respond)
            out["alice"] = await initiate_link(
                a_end, identity=alice, community_id=COMMUNITY, admit=allow, remote_address="m"
            )
        try:
            yield out["alice"], out["bob"]
        finally:
            await out["alice"].aclose()
            await out["bob"].aclose()
            tg.cancel_scope.cancel()
            await relay_a.aclose()  # the relay closes only what it sends to
            await relay_b.aclose()


class Tamper:
    """Passes the handshake through, then mutates application traffic."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.chunks = 0
        self.seen: list[bytes] = []

    def __call__(self, data: bytes) -> bytes:
        self.chunks += 1
        if self.chunks <= 2:  # hello and auth
            return data
        self.seen.append(data)
        if self.mode == "flip":
            return data[:-1] + bytes([data[-1] ^ 1])
        if self.mode == "replay" and len(self.seen) == 2:
            return self.seen[0]
        if self.mode == "swap" and len(self.seen) == 1:
            return b""  # hold the first frame back ...
        if self.mode == "swap" and len(self.seen) == 2:
            return data + self.seen[0]  # ... and deliver it after the second
        return data


@pytest.mark.parametrize("mode", ["flip", "replay", "swap"])
@pytest.mark.anyio
async def test_tampered_replayed_or_reordered_frame_closes_the_link(mode: str) -> None:
    tamper = Tamper(mode)
    async with relayed_links(tamper) as (alice, bob):
        await alice.send({"n": 1})
        if mode != "swap":
            if mode == "flip":
                with pytest.raises(ProtocolError):
                    await bob.receive()
                assert bob.closed
                return
            assert await bob.receive() == {"n": 1}
        await alice.send({"n": 2})
        with pytest.raises(ProtocolError):
            await bob.receive()
        assert bob.closed
        with pytest.raises(Partition):
            await bob.receive()


@pytest.mark.anyio
async def test_oversized_message_is_refused_on_send_and_link_stays_usable() -> None:
    async with relayed_links(lambda d: d) as (alice, bob):
        with pytest.raises(ProtocolError):
            await alice.send({"blob": b"x" * (1 << 20)})
        assert not alice.closed
        await alice.send({"ok": 1})
        assert await bob.receive() == {"ok": 1}


@pytest.mark.anyio
async def test_non_map_plaintext_closes_the_link() -> None:
    async with relayed_links(lambda d: d) as (alice, bob):
        # Seal a valid msgpack array with Alice's own session: authentic, but not a map.
        frame = alice._session.seal(encode_batch([msgpack.packb([1, 2])]))
        await alice._stream.send(encode_frame(frame))
        with pytest.raises(ProtocolError):
            await bob.receive()
        assert bob.closed


@pytest.mark.anyio
async def test_peer_closing_mid_frame_is_protocol_error() -> None:
    async with relayed_links(lambda d: d) as (alice, bob):
        await alice._stream.send(b"\x00\x00\x00\x10abc")
        await alice._stream.send_eof()
        with pytest.raises(ProtocolError):
            await bob.receive()


@pytest.mark.anyio
async def test_concurrent_senders_in_memory_keep_every_message() -> None:
    async with relayed_links(lambda d: d) as (alice, bob):
        received: list[dict[str, Any]] = []

        async def sender(k: int) -> None:
            for i in range(50):
                await alice.send({"k": k, "i": i})

        async with anyio.create_task_group() as tg:
            for k in range(8):
                tg.start_soon(sender, k)
            for _ in range(400):
                received.append(await bob.receive())
        for k in range(8):
            assert [m["i"] for m in received if m["k"] == k] == list(range(50))


def test_public_api_exports() -> None:
    expected = {
        "PROTOCOL_VERSION", "Admit", "Link", "LinkHandler", "MemoryByteStream", "Session", "accept_link",
        "create_listener", "format_address", "initiate_link", "listener_port", "memory_stream_pair",
        "open_link", "serve_links", "socket_peer_address",
    }  # fmt: skip
    assert set(hearthnet.transport.__all__) == expected
    for name in expected:
        assert getattr(hearthnet.transport, name) is not None
