"""The link handshake as pure state machines: messages, transcript, keys.

No I/O happens here; :mod:`hearthnet.transport.link` moves the bytes.  Three
plaintext messages, each one frame holding one msgpack map (see
``specs/transport.md``)::

    1. initiator -> responder   {v, community_id, node_id, eph, nonce}
    2. responder -> initiator   {hello: <bytes of a map like message 1>, sig}
    3. initiator -> responder   {auth: sig}

Message 2 carries its body as the exact bytes that were signed, so nobody ever
verifies a signature over a re-serialised dict.  Signatures cover a hash of a
fixed label, a role label (``responder``/``initiator``, so one side's signature
can never be reflected as the other's) and the exact bytes of everything said
so far.  Session keys come from the X25519 shared secret of the two fresh
ephemeral keys and the hash of messages 1 and 2.  Either side may instead send
``{error, message}`` and close; a ``revoked`` refusal, made only once the peer
has proven its key, may add ``event``: the signed revocation, so that the
revoked node can learn it (and check it) instead of just being turned away.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Any

import nacl.bindings
import nacl.exceptions
import nacl.public

from hearthnet.errors import (
    BadRequest,
    BusError,
    InvalidSignature,
    ProtocolError,
    Revoked,
    Unauthorized,
)
from hearthnet.identity.keys import SIGNATURE_LEN, Identity, public_key_from_node_id, verify_signature
from hearthnet.wire.codec import MsgLimits, pack, unpack_map

__all__ = [
    "HANDSHAKE_LABEL",
    "HANDSHAKE_LIMITS",
    "PROTOCOL_VERSION",
    "Hello",
    "InitiatorHandshake",
    "ResponderHandshake",
    "SessionKeys",
    "parse_hello",
    "raise_if_refusal",
    "refusal_map",
    "transcript_digest",
]

PROTOCOL_VERSION = 2
"""2: an established frame carries a batch of length-prefixed messages (1: one message)."""
HANDSHAKE_LABEL = b"hearthnet/handshake/v1"
ROLE_RESPONDER = b"responder"
ROLE_INITIATOR = b"initiator"
EPH_LEN = 32
NONCE_LEN = 32
MAX_COMMUNITY_ID_LEN = 256
MAX_NODE_ID_LEN = 128
MAX_ERROR_MESSAGE_LEN = 1024
MAX_EVIDENCE_BYTES = 6 * 1024
"""Largest revocation event a refusal carries (a revocation with a 1000-character reason is ~4.3 KB)."""

#: Handshake messages are tiny; decode them under much tighter limits than calls.
HANDSHAKE_LIMITS = MsgLimits(
    max_bin_len=8 * 1024, max_str_len=MAX_ERROR_MESSAGE_LEN, max_array_len=0, max_map_len=8, max_ext_len=0
)

_HELLO_KEYS = frozenset({"v", "community_id", "node_id", "eph", "nonce"})
_REFUSAL_CODES: dict[str, type[BusError]] = {
    cls.code: cls for cls in (Unauthorized, Revoked, InvalidSignature, BadRequest)
}
_LEN = struct.Struct(">I")


@dataclass(frozen=True)
class Hello:
    """The fields both sides announce."""

    version: int
    community_id: str
    node_id: str
    eph: bytes
    nonce: bytes

    def to_map(self) -> dict[str, Any]:
        return {
            "v": self.version,
            "community_id": self.community_id,
            "node_id": self.node_id,
            "eph": self.eph,
            "nonce": self.nonce,
        }


@dataclass(frozen=True)
class SessionKeys:
    """Keys for one side of an established link."""

    send_key: bytes
    recv_key: bytes
    transcript_hash: bytes


def _decode(frame: bytes) -> dict[str, Any]:
    return unpack_map(frame, limits=HANDSHAKE_LIMITS)


def parse_hello(fields: dict[str, Any]) -> Hello:
    """Validate a hello map strictly (exact keys, types and lengths) or raise ``ProtocolError``."""
    if set(fields) != _HELLO_KEYS:
        raise ProtocolError(f"hello must have exactly the keys {sorted(_HELLO_KEYS)}")
    version = fields["v"]
    if type(version) is not int:
        raise ProtocolError("hello.v must be an integer")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unsupported protocol version {version}; this node speaks {PROTOCOL_VERSION}")
    community_id, node_id = fields["community_id"], fields["node_id"]
    if not isinstance(community_id, str) or not 0 < len(community_id) <= MAX_COMMUNITY_ID_LEN:
        raise ProtocolError("hello.community_id must be a non-empty string of at most 256 characters")
    if not isinstance(node_id, str) or len(node_id) > MAX_NODE_ID_LEN:
        raise ProtocolError("hello.node_id must be a node id string")
    try:
        public_key_from_node_id(node_id)
    except BadRequest as exc:
        raise ProtocolError(f"hello.node_id is not a valid node id: {exc.message}") from exc
    eph, nonce = fields["eph"], fields["nonce"]
    if not isinstance(eph, bytes) or len(eph) != EPH_LEN:
        raise ProtocolError("hello.eph must be 32 bytes")
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_LEN:
        raise ProtocolError("hello.nonce must be 32 bytes")
    return Hello(version, community_id, node_id, eph, nonce)


def refusal_map(error: BusError) -> dict[str, Any]:
    """The plaintext refusal for ``error``: ``{error, message}``, plus ``event`` for a ``revoked``
    refusal that carries its (small enough) signed revocation event."""
    out: dict[str, Any] = {"error": error.code, "message": error.message[:MAX_ERROR_MESSAGE_LEN]}
    evidence = error.evidence if isinstance(error, Revoked) else None
    if evidence is not None and _evidence_size(evidence) <= MAX_EVIDENCE_BYTES:
        out["event"] = {"body": evidence["body"], "sig": evidence["sig"]}
    return out


def _evidence_size(evidence: dict[str, Any]) -> int:
    body, sig = evidence.get("body"), evidence.get("sig")
    if not isinstance(body, bytes) or not isinstance(sig, bytes):
        return MAX_EVIDENCE_BYTES + 1
    return len(body) + len(sig)


def raise_if_refusal(fields: dict[str, Any]) -> None:
    """If ``fields`` is a refusal, raise it as its error class (a ``revoked`` one with its ``evidence``)."""
    if "error" not in fields:
        return
    code, message = fields.get("error"), fields.get("message", "")
    if not isinstance(message, str):
        message = ""
    cls = _REFUSAL_CODES.get(code) if isinstance(code, str) else None
    allowed = {"error", "message", "event"} if cls is Revoked else {"error", "message"}
    if cls is None or set(fields) - allowed:
        raise ProtocolError(f"malformed handshake refusal (code {code!r:.40})")
    if "event" in fields:
        event = fields["event"]
        if (
            not isinstance(event, dict)
            or set(event) != {"body", "sig"}
            or not isinstance(event["body"], bytes)
            or not isinstance(event["sig"], bytes)
        ):
            raise ProtocolError("malformed handshake refusal: 'event' must be {body: bytes, sig: bytes}")
        raise Revoked(f"peer refused the handshake: {message}", evidence=event)
    raise cls(f"peer refused the handshake: {message}")


def transcript_digest(role: bytes, *parts: bytes) -> bytes:
    """BLAKE2b-512 over the label, the role and each part, each length-prefixed."""
    h = hashlib.blake2b(digest_size=64)
    h.update(HANDSHAKE_LABEL)
    for part in (role, *parts):
        h.update(_LEN.pack(len(part)))
        h.update(part)
    return h.digest()


def _derive(
    eph: nacl.public.PrivateKey, peer_eph: bytes, msg1: bytes, msg2: bytes, initiator: bool
) -> SessionKeys:
    try:
        shared = nacl.bindings.crypto_scalarmult(bytes(eph), peer_eph)
    except nacl.exceptions.CryptoError as exc:
        raise ProtocolError("peer's ephemeral key is degenerate") from exc
    if shared == bytes(32):
        raise ProtocolError("peer's ephemeral key is degenerate")
    th = transcript_digest(b"keys", msg1, msg2)
    i2r = hashlib.blake2b(th, digest_size=32, key=shared, person=b"hearthnet/i2r/v1").digest()
    r2i = hashlib.blake2b(th, digest_size=32, key=shared, person=b"hearthnet/r2i/v1").digest()
    if initiator:
        return SessionKeys(send_key=i2r, recv_key=r2i, transcript_hash=th)
    return SessionKeys(send_key=r2i, recv_key=i2r, transcript_hash=th)


def _check_peer(hello: Hello, identity: Identity, community_id: str) -> None:
    if hello.node_id == identity.node_id:
        raise Unauthorized("peer claims our own node id (reflection or self-connection)")
    if hello.community_id != community_id:
        raise Unauthorized(f"peer belongs to another community ({hello.community_id!r:.80})")


class InitiatorHandshake:
    """The connecting side: ``hello`` -> ``read_hello`` -> ``auth`` -> ``session_keys``."""

    def __init__(self, identity: Identity, community_id: str, *, expected_peer: str | None = None) -> None:
        self._identity = identity
        self._community_id = community_id
        self._expected_peer = expected_peer
        self._eph = nacl.public.PrivateKey.generate()
        hello = Hello(
            PROTOCOL_VERSION,
            community_id,
            identity.node_id,
            bytes(self._eph.public_key),
            os.urandom(NONCE_LEN),
        )
        self.hello: bytes = pack(hello.to_map())
        self._msg2: bytes | None = None
        self._peer: Hello | None = None

    @property
    def peer_id(self) -> str | None:
        return self._peer.node_id if self._peer else None

    def read_hello(self, frame: bytes) -> str:
        """Verify the responder's hello (message 2); return its proven node id."""
        fields = _decode(frame)
        raise_if_refusal(fields)
        if set(fields) != {"hello", "sig"}:
            raise ProtocolError("responder hello must have exactly the keys ['hello', 'sig']")
        body, sig = fields["hello"], fields["sig"]
        if not isinstance(body, bytes) or not isinstance(sig, bytes) or len(sig) != SIGNATURE_LEN:
            raise ProtocolError("responder hello: 'hello' must be bytes and 'sig' 64 bytes")
        hello = parse_hello(_decode(body))
        _check_peer(hello, self._identity, self._community_id)
        if self._expected_peer is not None and hello.node_id != self._expected_peer:
            raise Unauthorized(f"expected peer {self._expected_peer} but {hello.node_id} answered")
        verify_signature(hello.node_id, transcript_digest(ROLE_RESPONDER, self.hello, body), sig)
        self._msg2 = frame
        self._peer = hello
        return hello.node_id

    def _require(self) -> tuple[bytes, Hello]:
        if self._msg2 is None or self._peer is None:
            raise RuntimeError("read_hello() must succeed first")
        return self._msg2, self._peer

    def auth(self) -> bytes:
        """Message 3: our signature over both hellos' exact bytes."""
        msg2, _ = self._require()
        sig = self._identity.sign(transcript_digest(ROLE_INITIATOR, self.hello, msg2))
        return pack({"auth": sig})

    def session_keys(self) -> SessionKeys:
        msg2, peer = self._require()
        return _derive(self._eph, peer.eph, self.hello, msg2, initiator=True)


class ResponderHandshake:
    """The accepting side: ``read_hello`` -> ``hello`` -> ``read_auth`` -> ``session_keys``."""

    def __init__(self, identity: Identity, community_id: str) -> None:
        self._identity = identity
        self._community_id = community_id
        self._eph = nacl.public.PrivateKey.generate()
        self._nonce = os.urandom(NONCE_LEN)
        self._msg1: bytes | None = None
        self._msg2: bytes | None = None
        self._peer: Hello | None = None
        self._authenticated = False

    def read_hello(self, frame: bytes) -> str:
        """Check the initiator's hello (message 1); return the node id it *claims*."""
        hello = parse_hello(_decode(frame))
        _check_peer(hello, self._identity, self._community_id)
        self._msg1 = frame
        self._peer = hello
        return hello.node_id

    def hello(self) -> bytes:
        """Message 2: our hello body and our signature over message 1 and that body."""
        if self._msg1 is None:
            raise RuntimeError("read_hello() must succeed first")
        body = pack(
            Hello(
                PROTOCOL_VERSION,
                self._community_id,
                self._identity.node_id,
                bytes(self._eph.public_key),
                self._nonce,
            ).to_map()
        )
        sig = self._identity.sign(transcript_digest(ROLE_RESPONDER, self._msg1, body))
        self._msg2 = pack({"hello": body, "sig": sig})
        return self._msg2

    def read_auth(self, frame: bytes) -> str:
        """Verify message 3; return the initiator's now proven node id."""
        if self._msg1 is None or self._msg2 is None or self._peer is None:
            raise RuntimeError("hello() must be sent first")
        fields = _decode(frame)
        raise_if_refusal(fields)
        if set(fields) != {"auth"} or not isinstance(fields["auth"], bytes):
            raise ProtocolError("auth must be exactly {'auth': <64 bytes>}")
        verify_signature(
            self._peer.node_id, transcript_digest(ROLE_INITIATOR, self._msg1, self._msg2), fields["auth"]
        )
        self._authenticated = True
        return self._peer.node_id

    def session_keys(self) -> SessionKeys:
        if not self._authenticated or self._msg1 is None or self._msg2 is None or self._peer is None:
            raise RuntimeError("read_auth() must succeed first")
        return _derive(self._eph, self._peer.eph, self._msg1, self._msg2, initiator=False)
