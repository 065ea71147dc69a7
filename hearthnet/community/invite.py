"""The one-line invite token consumed by ``hearthnet join TOKEN``.

Format: ``hn1.<base64url(msgpack body)>.<base64url(Ed25519 signature)>``; the
inviter signs the exact body bytes.  The token only tells the invitee where
and whom to contact; admission itself is the signed ``member.invited`` event
(``invite_event_id``) in the community log.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from dataclasses import dataclass
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, BusError, Expired
from hearthnet.events.ulid import is_ulid
from hearthnet.identity.keys import Identity, public_key_from_node_id, verify_signature
from hearthnet.wire.codec import MsgLimits, pack, unpack_map

__all__ = ["TOKEN_PREFIX", "InviteToken", "decode_token", "encode_token", "validate_token"]

TOKEN_PREFIX = "hn1"
_MAX_TOKEN_CHARS = 8192
_MAX_ADDRESSES = 16
_B64_RE = re.compile(r"[A-Za-z0-9_-]+")
_ADDRESS_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):([0-9]{1,5})")
_LIMITS = MsgLimits(max_bin_len=4096, max_str_len=4096, max_array_len=64, max_map_len=32, max_ext_len=0)
_FIELDS = frozenset(
    {
        "v",
        "community_id",
        "community_name",
        "inviter",
        "addresses",
        "invitee",
        "level",
        "invite_event_id",
        "expires_at",
    }
)


@dataclass(frozen=True)
class InviteToken:
    community_id: str
    community_name: str
    inviter: str
    addresses: list[str]
    invitee: str
    level: Level
    invite_event_id: str
    expires_at: int  # ms since the epoch


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not _B64_RE.fullmatch(text):
        raise BadRequest("invite token is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise BadRequest("invite token is not base64url") from exc


def encode_token(token: InviteToken, inviter_identity: Identity) -> str:
    """Sign ``token`` as ``inviter_identity`` (must be ``token.inviter``); one line."""
    if inviter_identity.node_id != token.inviter:
        raise BadRequest("the token's inviter must be the signing identity")
    fields = _fields(token)
    _validate(fields)
    body = pack(fields)
    return f"{TOKEN_PREFIX}.{_b64(body)}.{_b64(inviter_identity.sign(body))}"


def validate_token(token: InviteToken) -> None:
    """Raise ``BadRequest`` if ``token`` could not be encoded (bad address, empty name, ...)."""
    _validate(_fields(token))


def _fields(token: InviteToken) -> dict[str, Any]:
    return {
        "v": 1,
        "community_id": token.community_id,
        "community_name": token.community_name,
        "inviter": token.inviter,
        "addresses": list(token.addresses),
        "invitee": token.invitee,
        "level": token.level.label,
        "invite_event_id": token.invite_event_id,
        "expires_at": token.expires_at,
    }


def decode_token(text: str, *, now_ms: int | None = None) -> InviteToken:
    """Parse and verify a token.

    ``BadRequest`` if malformed, ``InvalidSignature`` if not signed by its
    inviter, ``Expired`` when past ``expires_at``.
    """
    if not isinstance(text, str) or len(text) > _MAX_TOKEN_CHARS:
        raise BadRequest("an invite token is one line starting with 'hn1.'")
    parts = text.strip().split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise BadRequest("an invite token looks like 'hn1.<body>.<signature>'")
    body = _unb64(parts[1])
    signature = _unb64(parts[2])
    try:
        fields = unpack_map(body, limits=_LIMITS)
    except BusError as exc:
        raise BadRequest(f"invite token body is malformed: {exc.message}") from exc
    inviter = fields.get("inviter")
    if not isinstance(inviter, str):
        raise BadRequest("invite token has no inviter")
    verify_signature(inviter, body, signature)
    token = _validate(fields)
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if now >= token.expires_at:
        raise Expired("this invite token has expired; ask for a new one")
    return token


def _validate(fields: dict[str, Any]) -> InviteToken:
    if set(fields) != _FIELDS:
        raise BadRequest("invite token fields are wrong")
    if fields["v"] != 1 or type(fields["v"]) is not int:
        raise BadRequest("unsupported invite token version")
    for name in ("community_id", "community_name", "inviter", "invitee", "level", "invite_event_id"):
        if not isinstance(fields[name], str) or not 0 < len(fields[name]) <= 256:
            raise BadRequest(f"invite token field {name!r} must be a non-empty string")
    for name in ("inviter", "invitee"):
        public_key_from_node_id(fields[name])
    if fields["level"] not in ("member", "trusted", "anchor"):
        raise BadRequest("invite token level must be member, trusted or anchor")
    if not is_ulid(fields["invite_event_id"]):
        raise BadRequest("invite token invite_event_id must be a ULID")
    expires_at = fields["expires_at"]
    if type(expires_at) is not int or not 0 <= expires_at < 1 << 53:
        raise BadRequest("invite token expires_at must be ms since the epoch")
    addresses = fields["addresses"]
    if not isinstance(addresses, list) or not 0 < len(addresses) <= _MAX_ADDRESSES:
        raise BadRequest(f"invite token needs 1..{_MAX_ADDRESSES} addresses")
    for address in addresses:
        match = _ADDRESS_RE.fullmatch(address) if isinstance(address, str) else None
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise BadRequest(f"invite token address must be 'host:port', got {address!r:.60}")
    return InviteToken(
        community_id=fields["community_id"],
        community_name=fields["community_name"],
        inviter=fields["inviter"],
        addresses=list(addresses),
        invitee=fields["invitee"],
        level=Level.parse(fields["level"]),
        invite_event_id=fields["invite_event_id"],
        expires_at=expires_at,
    )
