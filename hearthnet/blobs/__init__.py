"""Content-addressed blob store: ``blake3:<hex>`` ids, fixed-size chunks, manifests.

Pure parts (:mod:`~hearthnet.blobs.cid`, :mod:`~hearthnet.blobs.manifest`) have
no I/O; :class:`BlobStore` is the blocking on-disk store (wrap it in
``anyio.to_thread``).  Disk layout and guarantees: ``specs/blobs.md``.
"""

from hearthnet.blobs.cid import CHUNK_SIZE, CidHasher, blob_cid, chunk_cid, is_cid, parse_cid
from hearthnet.blobs.manifest import MAX_CHUNK_SIZE, Manifest, ManifestBuilder, manifest_for_bytes
from hearthnet.blobs.store import BlobInfo, BlobStore, CorruptBlob, ReassemblyCheck

__all__ = [
    "CHUNK_SIZE",
    "MAX_CHUNK_SIZE",
    "BlobInfo",
    "BlobStore",
    "CidHasher",
    "CorruptBlob",
    "Manifest",
    "ManifestBuilder",
    "ReassemblyCheck",
    "blob_cid",
    "chunk_cid",
    "is_cid",
    "manifest_for_bytes",
    "parse_cid",
]
