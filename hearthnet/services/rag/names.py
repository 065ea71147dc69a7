"""Corpus names and their ChromaDB collection names.

A corpus name is ``[a-z0-9-]+``, at most 64 characters (the capability
contract).  ``personal`` and ``system`` are reserved: they are valid names, but
callers that create or federate corpora must treat them specially
(:data:`RESERVED`), so :func:`validate_corpus_name` accepts them unless asked
not to.

ChromaDB requires collection names of 3-512 characters from
``[a-zA-Z0-9._-]`` that start and end alphanumeric.  ``"hn-" + name + "-v1"``
is always valid for a valid corpus name: it is at least 7 characters long, starts
with ``h`` and ends with ``1``, and a leading or trailing ``-`` in the corpus name
lands in the middle.
"""

from __future__ import annotations

import re

from hearthnet.errors import BadRequest

__all__ = [
    "COLLECTION_PREFIX",
    "COLLECTION_SUFFIX",
    "KEPT_LOCAL",
    "LANGUAGE",
    "MAX_CORPUS_NAME",
    "PERSONAL",
    "RESERVED",
    "SYSTEM",
    "collection_name",
    "corpus_from_collection",
    "host_label",
    "is_language",
    "staging_collection_name",
    "validate_corpus_name",
]

MAX_CORPUS_NAME = 64
RESERVED: frozenset[str] = frozenset({"personal", "system"})
PERSONAL = "personal"
SYSTEM = "system"
KEPT_LOCAL: tuple[tuple[str, dict[str, str]], ...] = (
    ("rag.query", {"corpus": PERSONAL}),
    ("rag.ingest", {"corpus": PERSONAL}),
)
"""Calls every node keeps to itself, whether or not it runs RAG (``CapabilityBus.keep_local``)."""
COLLECTION_PREFIX = "hn-"
COLLECTION_SUFFIX = "-v1"
_NAME = re.compile(r"[a-z0-9-]+")


def validate_corpus_name(name: object, *, allow_reserved: bool = True) -> str:
    """Return ``name`` if it is a valid corpus name, else raise :class:`BadRequest`."""
    if not isinstance(name, str):
        raise BadRequest(f"corpus name must be a string, got {type(name).__name__}")
    if not name:
        raise BadRequest("corpus name is empty: use 1-64 characters of a-z, 0-9 and '-'")
    if len(name) > MAX_CORPUS_NAME:
        raise BadRequest(f"corpus name is {len(name)} characters long: at most {MAX_CORPUS_NAME} allowed")
    if _NAME.fullmatch(name) is None:
        raise BadRequest(f"corpus name {name!r} is invalid: use only lowercase a-z, digits 0-9 and '-'")
    if not allow_reserved and name in RESERVED:
        raise BadRequest(f"corpus name {name!r} is reserved")
    return name


LANGUAGE = re.compile(r"[A-Za-z0-9_-]{1,16}")
"""A language tag as chunks and ingest events carry it ('en', 'pt-BR', 'und'): letters,
digits, '-' and '_', 1..16 of them, so nothing shown to a member can steer a terminal."""


def is_language(value: object) -> bool:
    return isinstance(value, str) and LANGUAGE.fullmatch(value) is not None


def collection_name(corpus: str) -> str:
    """The ChromaDB collection that holds ``corpus`` (validated first)."""
    return f"{COLLECTION_PREFIX}{validate_corpus_name(corpus)}{COLLECTION_SUFFIX}"


def staging_collection_name(corpus: str) -> str:
    """Where a reindex writes the rebuilt ``corpus`` before it replaces the collection.

    ``collection_name(corpus) + ".rebuild"``: valid for ChromaDB (ends alphanumeric) and never
    taken for a corpus's own collection by :func:`corpus_from_collection`.
    """
    return f"{collection_name(corpus)}.rebuild"


def corpus_from_collection(collection: str) -> str | None:
    """The corpus held by ``collection``, or None if it is not one of ours."""
    if not (collection.startswith(COLLECTION_PREFIX) and collection.endswith(COLLECTION_SUFFIX)):
        return None
    name = collection[len(COLLECTION_PREFIX) : -len(COLLECTION_SUFFIX)]
    if not name or len(name) > MAX_CORPUS_NAME or _NAME.fullmatch(name) is None:
        return None
    return name


def host_label(node_id: str, name: str | None = None) -> str:
    """A node as messages name it: ``name (node id)``, or the id alone when no name is known.

    The name is the peer's own word (from its manifest): cut to 64 characters, and any that
    could steer a terminal replaced by '?'.
    """
    if not name:
        return node_id
    clean = "".join(ch if ch.isprintable() else "?" for ch in name[:64])
    return f"{clean} ({node_id})"
