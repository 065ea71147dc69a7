"""Ed25519 key pairs and the ``ed25519:<base64url>`` node id.

The private key lives in the node's home as a 32-byte seed, file mode 0600,
written atomically.  Nothing here performs network I/O.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import nacl.exceptions
import nacl.signing

from hearthnet.errors import BadRequest, InvalidSignature

NODE_ID_PREFIX = "ed25519:"
_SEED_LEN = 32
_PUBLIC_KEY_LEN = 32
SIGNATURE_LEN = 64


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(padded.encode("ascii"))


def node_id_from_public_key(public_key: bytes) -> str:
    """The node id of an Ed25519 public key."""
    if len(public_key) != _PUBLIC_KEY_LEN:
        raise BadRequest(f"an Ed25519 public key has 32 bytes, got {len(public_key)}")
    return NODE_ID_PREFIX + _b64url(public_key)


def public_key_from_node_id(node_id: str) -> bytes:
    """Parse a node id back into its 32-byte public key, or raise ``BadRequest``."""
    if not isinstance(node_id, str) or not node_id.startswith(NODE_ID_PREFIX):
        raise BadRequest(f"a node id looks like 'ed25519:<base64url>', got {node_id!r:.80}")
    body = node_id[len(NODE_ID_PREFIX) :]
    try:
        raw = _unb64url(body)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise BadRequest(f"node id is not base64url: {node_id!r:.80}") from exc
    if len(raw) != _PUBLIC_KEY_LEN or _b64url(raw) != body:
        raise BadRequest(f"node id does not encode a 32-byte key: {node_id!r:.80}")
    return raw


def verify_signature(node_id: str, message: bytes, signature: bytes) -> None:
    """Check ``signature`` over the exact ``message`` bytes; raise ``InvalidSignature``."""
    try:
        key = nacl.signing.VerifyKey(public_key_from_node_id(node_id))
    except BadRequest as exc:
        raise InvalidSignature(f"cannot verify: {exc.message}") from exc
    if len(signature) != SIGNATURE_LEN:
        raise InvalidSignature("signature must be 64 bytes")
    try:
        key.verify(message, signature)
    except nacl.exceptions.BadSignatureError as exc:
        raise InvalidSignature(f"signature by {node_id} does not verify") from exc


@dataclass(frozen=True)
class Identity:
    """A node's Ed25519 key pair."""

    signing_key: nacl.signing.SigningKey

    @classmethod
    def generate(cls) -> Identity:
        return cls(nacl.signing.SigningKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        if len(seed) != _SEED_LEN:
            raise BadRequest("an Ed25519 seed has 32 bytes")
        return cls(nacl.signing.SigningKey(seed))

    @functools.cached_property
    def public_key(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    @functools.cached_property
    def node_id(self) -> str:
        return node_id_from_public_key(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """A detached 64-byte signature over ``message``."""
        return self.signing_key.sign(message).signature

    def __repr__(self) -> str:  # never print key material
        return f"Identity({self.node_id})"


def create_identity(path: Path) -> Identity:
    """Generate a key and write its seed to ``path`` (mode 0600); refuse to overwrite."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise BadRequest(f"an identity already exists at {path}; refusing to overwrite it")
    identity = Identity.generate()
    seed = bytes(identity.signing_key)
    # Written whole to a temporary file first, then linked into place: a crash leaves
    # either no key file or a complete one, never an empty key that `init` would refuse
    # to replace; `link` fails if the name exists, so nothing is ever overwritten.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.write(fd, seed)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError as exc:
            raise BadRequest(f"an identity already exists at {path}; refusing to overwrite it") from exc
    finally:
        os.unlink(tmp)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return identity


def load_identity(path: Path) -> Identity:
    """Read the seed at ``path``; refuse a key file others can read."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise BadRequest(f"no identity at {path}: run 'hearthnet init' first") from exc
    if st.st_mode & 0o077:
        raise BadRequest(f"key file {path} is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 it")
    seed = path.read_bytes()
    return Identity.from_seed(seed)
