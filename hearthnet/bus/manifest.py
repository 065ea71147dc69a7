"""Signed, short-lived capability manifests exchanged between peers.

A manifest lists what a node offers.  It travels as ``{body, sig}`` where
``body`` is the exact msgpack bytes the node signed; receivers verify the
signature over those bytes, that the signer is the link's proven peer, that it
belongs to our community, that it has not expired and that it is newer than
the last one seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearthnet.bus.descriptors import CapabilityDescriptor
from hearthnet.errors import BadRequest, BusError, Expired, InvalidSignature
from hearthnet.identity import Identity, verify_signature
from hearthnet.wire.codec import pack, unpack_map

MANIFEST_TTL_MS = 60_000
MAX_CAPABILITIES = 1000


@dataclass(frozen=True)
class Manifest:
    node_id: str
    community_id: str
    seq: int
    issued_at_ms: int
    expires_at_ms: int
    name: str
    addresses: tuple[str, ...]
    capabilities: tuple[CapabilityDescriptor, ...]


def sign_manifest(
    identity: Identity,
    *,
    community_id: str,
    seq: int,
    now_ms: int,
    name: str,
    addresses: Sequence[str],
    capabilities: Sequence[CapabilityDescriptor],
    ttl_ms: int = MANIFEST_TTL_MS,
) -> dict[str, Any]:
    body = pack(
        {
            "node_id": identity.node_id,
            "community_id": community_id,
            "seq": seq,
            "issued_at_ms": now_ms,
            "expires_at_ms": now_ms + ttl_ms,
            "name": name,
            "addresses": list(addresses),
            "capabilities": [c.to_wire() for c in capabilities if not c.local_only],
        }
    )
    return {"body": body, "sig": identity.sign(body)}


def verify_manifest(wire: Mapping[str, Any], *, peer_id: str, community_id: str, now_ms: int) -> Manifest:
    """Check and decode a manifest a peer sent us; raise a ``BusError`` on any fault."""
    body, sig = wire.get("body"), wire.get("sig")
    if not isinstance(body, bytes) or not isinstance(sig, bytes):
        raise BadRequest("manifest must be {body: bin, sig: bin}")
    verify_signature(peer_id, body, sig)
    data = unpack_map(body)
    try:
        if data["node_id"] != peer_id:
            raise InvalidSignature("manifest names another node than the link's peer")
        if data["community_id"] != community_id:
            raise BadRequest("manifest is for another community")
        expires = int(data["expires_at_ms"])
        issued = int(data["issued_at_ms"])
        if expires < now_ms:
            raise Expired("manifest has expired")
        if not 0 < expires - issued <= 2 * MANIFEST_TTL_MS:
            raise BadRequest("manifest lifetime must be positive and at most twice the TTL")
        caps_raw = data["capabilities"]
        addresses = data["addresses"]
        if not isinstance(caps_raw, list) or len(caps_raw) > MAX_CAPABILITIES:
            raise BadRequest("manifest capabilities must be a bounded list")
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise BadRequest("manifest addresses must be strings")
        caps = tuple(CapabilityDescriptor.from_wire(c) for c in caps_raw if isinstance(c, dict))
        return Manifest(
            node_id=peer_id,
            community_id=community_id,
            seq=int(data["seq"]),
            issued_at_ms=issued,
            expires_at_ms=expires,
            name=str(data.get("name", "")),
            addresses=tuple(addresses[:16]),
            capabilities=caps,
        )
    except BusError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"malformed manifest: {type(exc).__name__}") from exc
