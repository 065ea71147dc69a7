"""``[rag]`` and its ``[[rag.archives]]`` tables: the corpora this node hosts and the external
archives it serves; ``HEARTHNET_RAG``, ``HEARTHNET_RAG_MODEL``, ``HEARTHNET_CHROMA_URL``,
``HEARTHNET_RAG_QUERY_MAX_CONCURRENT`` and the seeds' ``RAG_QUERY_TIMEOUT_SECONDS`` /
``RAG_EMBED_TIMEOUT_SECONDS`` override them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hearthnet.config.archives import (
    ENV_CHROMADB_URL,
    ArchiveConfig,
    ArchiveDefaults,
    check_server_url,
    normalize_url,
    resolve_archive,
)
from hearthnet.config.values import (
    array_of_tables,
    check_url,
    env_int,
    get,
    integer,
    positive_float,
    seconds,
    switched,
)
from hearthnet.errors import BadRequest

__all__ = ["ARCHIVE_KEYS", "KEYS", "MAX_ARCHIVES", "MAX_ARCHIVE_URLS", "RagConfig", "rag_env", "rag_from"]

KEYS = frozenset(
    {
        "enabled",
        "chroma_url",
        "query_timeout_seconds",
        "query_max_concurrent",
        "ingest_max_concurrent",
        "embed_timeout_seconds",
        "accept_new_corpora",
        "embedding_model",
        "archives",
        "archive_urls",
        "replicas",
        "max_replicas",
        "folders",
        "folder_settle_seconds",
    }
)
FOLDER_KEYS = frozenset({"path", "corpus"})
MAX_FOLDER_TABLES = 64
REPLICA_KEYS = frozenset({"corpus"})
MAX_REPLICA_TABLES = 64
ARCHIVE_KEYS = frozenset({"name", "label", "collection_name", "chromadb_url", "embedding_model", "layer"})
MAX_ARCHIVES = 64
"""``[[rag.archives]]`` tables one node may serve."""
MAX_ARCHIVE_URLS = 64
MAX_QUERY_CONCURRENT = 1024
QUERY_MAX_CONCURRENT = 256
"""``rag.query_max_concurrent`` by default (``specs/rag.md``: concurrent questions are embedded together)."""


@dataclass(frozen=True)
class RagConfig:
    enabled: bool = True
    chroma_url: str | None = None
    query_timeout_seconds: float = 5.0
    query_max_concurrent: int = QUERY_MAX_CONCURRENT
    """``rag.query`` calls one corpus admits at once (its questions are embedded together)."""
    ingest_max_concurrent: int = 2
    """Documents this node ingests at once (``rag.ingest`` calls admitted; 1 on a small device)."""
    embed_timeout_seconds: float = 10.0
    """The floor of an ``embed.text`` call's deadline: a call gets more when its size and the
    embedder's measured pace say so (``specs/embedding.md``, deadlines from the work)."""
    accept_new_corpora: bool = True
    embedding_model: str = "all-MiniLM-L6-v2"
    archives: tuple[ArchiveConfig, ...] = ()
    """External ChromaDB collections served read-only as corpora (``[[rag.archives]]``)."""
    archive_urls: tuple[str, ...] = ()
    """ChromaDB servers this node may ask for archives a call names (``search_archives``), besides
    those of ``archives`` and ``DOCPROC_CHROMADB_URL``: see :attr:`allowed_archive_urls`."""
    archive_defaults: ArchiveDefaults = field(default_factory=ArchiveDefaults)
    """What an archive leaves out, after the seeds' environment variables (``RAG_DEFAULT_LAYER`` ...)."""
    replicas: tuple[str, ...] = ()
    """Corpora this node holds a replica of (``[[rag.replicas]] corpus = "family"``): it follows their
    host's signed events (``specs/replicas.md``)."""
    max_replicas: int | None = None
    """How many other nodes may replicate each corpus this node hosts (``None``: no cap)."""
    folders: tuple[tuple[str, str], ...] = ()
    """Folders this node keeps indexed, ``(path, corpus)`` (``[[rag.folders]]``, ``specs/folders.md``)."""
    folder_settle_seconds: float = 1.0
    """The least time a watched file goes without a change before it is read (a file being
    written is read once it holds still; the window grows with the gaps between its writes)."""

    @property
    def allowed_archive_urls(self) -> frozenset[str]:
        """The allow-list, normalised: ``archive_urls`` and every configured archive's server."""
        return frozenset(
            normalize_url(u) for u in (*self.archive_urls, *(a.chromadb_url for a in self.archives))
        )


def rag_from(rag_s: Mapping[str, Any], env: Mapping[str, str], defaults: ArchiveDefaults) -> RagConfig:
    """``[rag]`` of config.toml (its keys checked by the caller)."""
    return RagConfig(
        enabled=get(rag_s, "enabled", bool, True, "rag"),
        chroma_url=check_url(get(rag_s, "chroma_url", str, None, "rag"), "rag.chroma_url"),
        query_timeout_seconds=seconds(rag_s, "query_timeout_seconds", 5.0, "rag"),
        query_max_concurrent=_query_max_concurrent(
            integer(rag_s, "query_max_concurrent", QUERY_MAX_CONCURRENT, 1, "rag")
        ),
        ingest_max_concurrent=_ingest_max_concurrent(integer(rag_s, "ingest_max_concurrent", 2, 1, "rag")),
        embed_timeout_seconds=seconds(rag_s, "embed_timeout_seconds", 10.0, "rag"),
        accept_new_corpora=get(rag_s, "accept_new_corpora", bool, True, "rag"),
        embedding_model=get(rag_s, "embedding_model", str, "all-MiniLM-L6-v2", "rag"),
        archives=_archives(rag_s, defaults),
        archive_urls=_archive_urls(rag_s, env),
        archive_defaults=defaults,
        replicas=_replicas(rag_s),
        max_replicas=_max_replicas(rag_s),
        folders=_folders(rag_s),
        folder_settle_seconds=seconds(rag_s, "folder_settle_seconds", 1.0, "rag"),
    )


def rag_env(rag: RagConfig, env: Mapping[str, str], embed_timeout: float | None) -> RagConfig:
    """The overrides of ``[rag]``; ``embed_timeout`` is ``RAG_EMBED_TIMEOUT_SECONDS`` if set."""
    rag = switched(rag, env, "HEARTHNET_RAG")
    if "HEARTHNET_RAG_MODEL" in env:
        rag = replace(rag, embedding_model=env["HEARTHNET_RAG_MODEL"])
    if "HEARTHNET_CHROMA_URL" in env:
        url = check_url(env["HEARTHNET_CHROMA_URL"] or None, "HEARTHNET_CHROMA_URL")
        rag = replace(rag, chroma_url=url)
    if "RAG_QUERY_TIMEOUT_SECONDS" in env:
        timeout = positive_float(env["RAG_QUERY_TIMEOUT_SECONDS"], "RAG_QUERY_TIMEOUT_SECONDS")
        rag = replace(rag, query_timeout_seconds=timeout)
    if embed_timeout is not None:
        rag = replace(rag, embed_timeout_seconds=embed_timeout)
    name = "HEARTHNET_RAG_QUERY_MAX_CONCURRENT"
    if name in env:
        limit = _query_max_concurrent(env_int(env, name, QUERY_MAX_CONCURRENT, 1), name)
        rag = replace(rag, query_max_concurrent=limit)
    return rag


def _query_max_concurrent(value: int, where: str = "rag.query_max_concurrent") -> int:
    if not 1 <= value <= MAX_QUERY_CONCURRENT:
        raise BadRequest(f"{where} must be 1..{MAX_QUERY_CONCURRENT}, got {value}")
    return value


def _archives(rag_s: Mapping[str, Any], defaults: ArchiveDefaults) -> tuple[ArchiveConfig, ...]:
    """``[[rag.archives]]``: each table strict, its left-out keys from ``defaults``; names unique."""
    out: list[ArchiveConfig] = []
    tables = array_of_tables(
        rag_s, "archives", "rag", ARCHIVE_KEYS, ("name", "collection_name"), MAX_ARCHIVES
    )
    for where, t in tables:
        archive = resolve_archive(
            name=get(t, "name", str, None, "rag.archives"),
            collection_name=get(t, "collection_name", str, None, "rag.archives"),
            label=get(t, "label", str, None, "rag.archives"),
            chromadb_url=get(t, "chromadb_url", str, None, "rag.archives"),
            embedding_model=get(t, "embedding_model", str, None, "rag.archives"),
            layer=get(t, "layer", str, None, "rag.archives"),
            defaults=defaults,
            setting=where,
        )
        if any(a.name == archive.name for a in out):
            raise BadRequest(
                f"{where}: name {archive.name!r} is used by an earlier archive; names must differ"
            )
        out.append(archive)
    return tuple(out)


def _archive_urls(rag_s: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, ...]:
    """``rag.archive_urls`` (each an http(s) URL), with ``DOCPROC_CHROMADB_URL`` when it is set."""
    urls = get(rag_s, "archive_urls", list, [], "rag")
    if len(urls) > MAX_ARCHIVE_URLS:
        raise BadRequest(
            f"rag.archive_urls in config.toml lists {len(urls)} URLs; at most {MAX_ARCHIVE_URLS}"
        )
    out = []
    for i, url in enumerate(urls):
        if not isinstance(url, str):
            raise BadRequest(f"rag.archive_urls[{i}] in config.toml must be a string, got {url!r}")
        out.append(check_server_url(url, f"rag.archive_urls[{i}] in config.toml"))
    from_env = env.get(ENV_CHROMADB_URL, "").strip()
    if from_env:
        out.append(check_server_url(from_env, ENV_CHROMADB_URL))
    return tuple(out)


def _replicas(rag_s: Mapping[str, Any]) -> tuple[str, ...]:
    """``[[rag.replicas]]``: each ``{corpus}`` a valid corpus name, not ``personal``, given once."""
    from hearthnet.contracts.rag import check_replicable

    out: list[str] = []
    for where, t in array_of_tables(rag_s, "replicas", "rag", REPLICA_KEYS, ("corpus",), MAX_REPLICA_TABLES):
        try:
            corpus = check_replicable(get(t, "corpus", str, None, "rag.replicas"))
        except BadRequest as exc:
            raise BadRequest(f"{where}: {exc.message}") from exc
        if corpus in out:
            raise BadRequest(f"{where}: corpus {corpus!r} is named by an earlier table")
        out.append(corpus)
    return tuple(out)


def _folders(rag_s: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``[[rag.folders]]``: each ``{path, corpus}``, an absolute path given once, a writable corpus."""
    from hearthnet.contracts.rag import check_writable, validate_corpus_name

    out: list[tuple[str, str]] = []
    for where, t in array_of_tables(
        rag_s, "folders", "rag", FOLDER_KEYS, ("path", "corpus"), MAX_FOLDER_TABLES
    ):
        path = get(t, "path", str, None, "rag.folders")
        if not path.startswith(("/", "~")):
            raise BadRequest(f"{where}: path {path!r} must be absolute")
        try:
            corpus = validate_corpus_name(get(t, "corpus", str, None, "rag.folders"))
            check_writable(corpus, is_local=True, what="documents")
        except BadRequest as exc:
            raise BadRequest(f"{where}: {exc.message}") from exc
        if any(p == path for p, _ in out):
            raise BadRequest(f"{where}: path {path!r} is named by an earlier table")
        out.append((path, corpus))
    return tuple(out)


def _max_replicas(rag_s: Mapping[str, Any]) -> int | None:
    if "max_replicas" not in rag_s:
        return None
    return integer(rag_s, "max_replicas", 0, 0, "rag")


def _ingest_max_concurrent(value: int) -> int:
    if value > 16:
        raise BadRequest(f"rag.ingest_max_concurrent must be 1..16, got {value}")
    return value
