"""Archive settings: one :class:`ArchiveConfig` per external ChromaDB collection, and the seeds' fallbacks.

Priority, as the seed runtimes have it: a value given for the archive itself,
then the environment variable, then the built-in default.

=====================  ============================  ==============================
setting                environment fallback          default
=====================  ============================  ==============================
``chromadb_url``       ``DOCPROC_CHROMADB_URL``      ``http://chromadb:8000``
``layer``              ``RAG_DEFAULT_LAYER``         ``chunk``
``embedding_model``    (none)                        ``jinaai/jina-embeddings-v2-base-de``
search ``top_k``       ``RAG_DEFAULT_TOP_K``         ``5``
TEI ``base_url``       ``DOCPROC_TEI_EMBEDDINGS_URL`` ``http://tei-embeddings:8080``
=====================  ============================  ==============================

Pure functions, no I/O; errors are ``bad_request`` naming the setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from hearthnet.contracts.rag import validate_corpus_name
from hearthnet.errors import BadRequest

__all__ = [
    "DEFAULT_CHROMADB_URL",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_LAYER",
    "DEFAULT_TEI_URL",
    "DEFAULT_TOP_K",
    "ENV_CHROMADB_URL",
    "ENV_LAYER",
    "ENV_TEI_URL",
    "ENV_TOP_K",
    "LAYERS",
    "MAX_LABEL",
    "MAX_TOP_K",
    "ArchiveConfig",
    "ArchiveDefaults",
    "archive_defaults",
    "check_collection_name",
    "check_layer",
    "check_server_url",
    "normalize_url",
    "resolve_archive",
]

ENV_CHROMADB_URL = "DOCPROC_CHROMADB_URL"
ENV_TEI_URL = "DOCPROC_TEI_EMBEDDINGS_URL"
ENV_TOP_K = "RAG_DEFAULT_TOP_K"
ENV_LAYER = "RAG_DEFAULT_LAYER"

DEFAULT_CHROMADB_URL = "http://chromadb:8000"
DEFAULT_TEI_URL = "http://tei-embeddings:8080"
DEFAULT_EMBEDDING_MODEL = "jinaai/jina-embeddings-v2-base-de"
DEFAULT_LAYER = "chunk"
DEFAULT_TOP_K = 5
MAX_TOP_K = 20

LAYERS = ("document", "page", "section", "chunk")
"""The platform's segment layers, coarse to fine; ``chunk`` is the one meant for retrieval."""
MAX_LABEL = 200
MAX_MODEL_NAME = 256

_COLLECTION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{1,510})[A-Za-z0-9]")
"""ChromaDB's rule: 3-512 characters of ``[a-zA-Z0-9._-]``, starting and ending alphanumeric."""


def check_server_url(url: object, setting: str) -> str:
    """An http(s) URL with a host and a valid port, no credentials, query or fragment."""
    if not isinstance(url, str) or not url.strip():
        raise BadRequest(f"{setting} must be an http(s) URL such as http://chromadb:8000")
    try:
        parts = urlsplit(url.strip())
        _ = parts.port  # a port that is not a number below 65536 raises here
    except ValueError as exc:
        raise BadRequest(f"{setting} is not a valid URL: {url[:200]!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"{setting} must be an http(s) URL with a host, got {url[:200]!r}")
    if parts.username is not None or parts.password is not None:
        raise BadRequest(f"{setting} must not carry credentials in the URL")
    if parts.query or parts.fragment:
        raise BadRequest(f"{setting} must be a base URL without '?' or '#', got {url[:200]!r}")
    return url.strip()


def normalize_url(url: str) -> str:
    """``url`` in one spelling, so two names of the same server compare equal.

    Scheme and host lower-cased, the default port written out, trailing slashes
    dropped: ``HTTP://ChromaDB:8000/`` and ``http://chromadb:8000`` are the same.
    Host names are not resolved (``localhost`` is not ``127.0.0.1``).
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def check_collection_name(name: object, setting: str) -> str:
    """A ChromaDB collection name (it goes into a URL path, so nothing else gets through)."""
    if not isinstance(name, str) or _COLLECTION.fullmatch(name) is None:
        shown = repr(name[:100]) if isinstance(name, str) else type(name).__name__
        raise BadRequest(
            f"{setting} must be a ChromaDB collection name (3-512 characters of letters, digits, "
            f"'.', '_' and '-', starting and ending with a letter or digit), got {shown}"
        )
    return name


def check_layer(layer: object, setting: str) -> str:
    if layer not in LAYERS:
        shown = repr(layer[:40]) if isinstance(layer, str) else type(layer).__name__
        raise BadRequest(f"{setting} must be one of {', '.join(LAYERS)}, got {shown}")
    assert isinstance(layer, str)
    return layer


def _check_model(model: object, setting: str) -> str:
    return _printable(model, setting, MAX_MODEL_NAME, "an embedding model name")


def _check_label(label: object, setting: str) -> str:
    return _printable(label, setting, MAX_LABEL, "a name")


def _printable(value: object, setting: str, most: int, what: str) -> str:
    """``value`` if it is 1..``most`` printable characters, not all blank; else ``bad_request``."""
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise BadRequest(f"{setting} must be {what} of 1-{most} characters")
    if not value.isprintable():
        raise BadRequest(f"{setting} must be printable characters only (no line breaks)")
    return value


@dataclass(frozen=True)
class ArchiveDefaults:
    """The fallbacks of settings an archive (or a ``rag_config`` entry) leaves out."""

    chromadb_url: str = DEFAULT_CHROMADB_URL
    tei_url: str = DEFAULT_TEI_URL
    layer: str = DEFAULT_LAYER
    top_k: int = DEFAULT_TOP_K
    embedding_model: str = DEFAULT_EMBEDDING_MODEL


def archive_defaults(env: Mapping[str, str]) -> ArchiveDefaults:
    """The defaults after the seeds' environment variables (an empty variable counts as unset)."""
    url = env.get(ENV_CHROMADB_URL, "").strip()
    tei = env.get(ENV_TEI_URL, "").strip()
    layer = env.get(ENV_LAYER, "").strip()
    top_k_text = env.get(ENV_TOP_K, "").strip()
    top_k = DEFAULT_TOP_K
    if top_k_text:
        if not top_k_text.isdigit() or not 1 <= int(top_k_text) <= MAX_TOP_K:
            raise BadRequest(f"{ENV_TOP_K} must be a whole number 1-{MAX_TOP_K}, got {top_k_text[:20]!r}")
        top_k = int(top_k_text)
    return ArchiveDefaults(
        chromadb_url=check_server_url(url, ENV_CHROMADB_URL) if url else DEFAULT_CHROMADB_URL,
        tei_url=check_server_url(tei, ENV_TEI_URL) if tei else DEFAULT_TEI_URL,
        layer=check_layer(layer, ENV_LAYER) if layer else DEFAULT_LAYER,
        top_k=top_k,
    )


@dataclass(frozen=True)
class ArchiveConfig:
    """One archive this node serves as a read-only corpus (a ``[[rag.archives]]`` table)."""

    name: str
    """Its corpus name (``[a-z0-9-]``, at most 64): what ``rag.query``'s params name."""
    collection_name: str
    chromadb_url: str
    embedding_model: str
    layer: str = DEFAULT_LAYER
    """The layer searched unless the caller's filter names ``layer`` itself."""
    label: str = ""
    """A human name for it; the corpus name if empty."""

    def __post_init__(self) -> None:
        validate_corpus_name(self.name, allow_reserved=False)
        check_collection_name(self.collection_name, "collection_name")
        check_server_url(self.chromadb_url, "chromadb_url")
        _check_model(self.embedding_model, "embedding_model")
        check_layer(self.layer, "layer")
        if self.label:
            _check_label(self.label, "label")

    @property
    def display_name(self) -> str:
        return self.label or self.name

    @property
    def server(self) -> str:
        """``chromadb_url`` normalised (see :func:`normalize_url`)."""
        return normalize_url(self.chromadb_url)


def resolve_archive(
    *,
    name: object,
    collection_name: object,
    defaults: ArchiveDefaults,
    setting: str,
    label: object = None,
    chromadb_url: object = None,
    embedding_model: object = None,
    layer: object = None,
) -> ArchiveConfig:
    """An :class:`ArchiveConfig` from the values given (``None``: not given), the rest from
    ``defaults``; errors name ``setting`` (e.g. ``[[rag.archives]] 2``) and the key."""
    try:
        corpus = validate_corpus_name(name, allow_reserved=False)
    except BadRequest as exc:
        raise BadRequest(f"{setting}: name: {exc.message}") from None
    where = f"{setting} ({corpus})"
    return ArchiveConfig(
        name=corpus,
        collection_name=check_collection_name(collection_name, f"{where}: collection_name"),
        chromadb_url=defaults.chromadb_url
        if chromadb_url is None
        else check_server_url(chromadb_url, f"{where}: chromadb_url"),
        embedding_model=defaults.embedding_model
        if embedding_model is None
        else _check_model(embedding_model, f"{where}: embedding_model"),
        layer=defaults.layer if layer is None else check_layer(layer, f"{where}: layer"),
        label="" if label is None else _check_label(label, f"{where}: label"),
    )
