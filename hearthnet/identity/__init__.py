"""Ed25519 node identities: keys, node ids, signing and verification."""

from hearthnet.identity.keys import (
    NODE_ID_PREFIX,
    Identity,
    create_identity,
    load_identity,
    node_id_from_public_key,
    public_key_from_node_id,
    verify_signature,
)

__all__ = [
    "NODE_ID_PREFIX",
    "Identity",
    "create_identity",
    "load_identity",
    "node_id_from_public_key",
    "public_key_from_node_id",
    "verify_signature",
]
