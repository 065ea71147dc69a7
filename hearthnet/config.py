"""Node configuration: frozen, validated dataclasses from TOML plus ``HEARTHNET_*`` overrides.

Precedence: built-in defaults < ``<home>/config.toml`` < environment.  The
``local`` preset (the default written by ``hearthnet init``) listens on
127.0.0.1 with an ephemeral port, which is what tests and the demo want.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

from hearthnet.errors import BadRequest
from hearthnet.services.rag.archives.config import (
    ENV_CHROMADB_URL,
    ArchiveConfig,
    ArchiveDefaults,
    archive_defaults,
    check_server_url,
    normalize_url,
    resolve_archive,
)
from hearthnet.services.rerank.config import RerankConfig, rerank_config, rerank_from_env
from hearthnet.wire.frames import DEFAULT_MAX_FRAME

CONFIG_FILE = "config.toml"


NAME_MAX = 64
"""A node's name is 1..64 printable characters: every peer's ``status`` shows it."""
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def host_problem(host: str) -> str | None:
    """Why ``host`` is neither an IP address nor a well-formed host name, or ``None``."""
    if not host:
        return "the host is empty"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if ":" in host:
        return f"{host!r} is not a valid IPv6 address"
    if all(part.isdigit() for part in host.split(".")):
        return f"{host!r} is not a valid IPv4 address"
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return f"{host!r} is not a valid host name (letters, digits and '-' in dot-separated labels)"
    if labels[-1].isdigit():
        return f"{host!r} is not a valid host name (its last label is a number)"
    return None


def parse_listen(text: str, setting: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as ``(host, port)``; errors name ``setting``."""
    host, sep, port = text.rpartition(":")
    shape = "HOST:PORT (an IP address or host name, and a port 0-65535; port 0 takes any free port)"
    if not sep or not port.isdigit() or int(port) > 65535:
        raise BadRequest(f"{setting} must be {shape}, got {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    problem = host_problem(host)
    if problem is not None:
        raise BadRequest(f"{setting} must be {shape}, got {text!r}: {problem}")
    return host, int(port)


def check_host(host: str, setting: str) -> str:
    """``host`` if it is an IP address or a well-formed host name; errors name ``setting``."""
    problem = host_problem(host)
    if problem is not None:
        raise BadRequest(f"{setting} must be an IP address or host name: {problem}")
    return host


def shown_name(name: str) -> str:
    """A peer's name as ``status`` shows it: what its own config allows (64 printable characters),
    whatever an older or hostile peer announces; other characters become U+FFFD."""
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in name[:NAME_MAX])


def check_name(name: str, setting: str) -> str:
    """A node name: 1..64 printable characters (no control or format characters)."""
    if not name.strip():
        raise BadRequest(f"{setting} must not be empty: give 1-{NAME_MAX} printable characters")
    if len(name) > NAME_MAX:
        raise BadRequest(f"{setting} is {len(name)} characters long; the limit is {NAME_MAX}")
    if not name.isprintable():
        bad = next(ch for ch in name if not ch.isprintable())
        raise BadRequest(
            f"{setting} must be printable characters only; it holds U+{ord(bad):04X} "
            "(a control or format character)"
        )
    return name


def _bool(text: str, name: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise BadRequest(f"{name} must be true or false, got {text!r}")


def _positive_float(value: Any, name: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{name} must be a number, got {value!r}") from exc
    if not 0 < f < 1e9:  # NaN and infinity too: a deadline of inf seconds overflows later
        raise BadRequest(f"{name} must be a positive number of seconds, got {value!r}")
    return f


@dataclass(frozen=True)
class NetworkConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    advertise_host: str | None = None
    max_frame: int = DEFAULT_MAX_FRAME
    handshake_timeout: float = 5.0
    keepalive_seconds: float = 10.0
    """A link we have written nothing on for this long gets a keepalive frame."""
    dead_after_seconds: float = 30.0
    """A link nothing has arrived on for this long is closed as dead (peer off or network cut)."""

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise BadRequest("listen_port must be 0..65535")
        if not 0 < 2 * self.keepalive_seconds <= self.dead_after_seconds:
            raise BadRequest(
                f"dead_after_seconds ({self.dead_after_seconds:g}) must be at least twice "
                f"keepalive_seconds ({self.keepalive_seconds:g})"
            )
        if not 64 * 1024 <= self.max_frame <= 64 * 1024 * 1024:
            raise BadRequest("max_frame must be between 64 KiB and 64 MiB")


@dataclass(frozen=True)
class OpenAIBackendConfig:
    base_url: str
    model: str
    dim: int
    api_key_env: str | None = None
    max_tokens: int = 512
    timeout_seconds: float = 10.0


@dataclass(frozen=True)
class EmbeddingConfig:
    enabled: bool = True
    model_dir: str | None = None
    threads: int | None = None
    openai: tuple[OpenAIBackendConfig, ...] = ()
    timeout_seconds: float = 10.0


MAX_ARCHIVES = 64
"""``[[rag.archives]]`` tables one node may serve."""
MAX_ARCHIVE_URLS = 64


@dataclass(frozen=True)
class RagConfig:
    enabled: bool = True
    chroma_url: str | None = None
    query_timeout_seconds: float = 5.0
    embed_timeout_seconds: float = 10.0
    accept_new_corpora: bool = True
    embedding_model: str = "all-MiniLM-L6-v2"
    archives: tuple[ArchiveConfig, ...] = ()
    """External ChromaDB collections served read-only as corpora (``[[rag.archives]]``)."""
    archive_urls: tuple[str, ...] = ()
    """ChromaDB servers this node may ask for archives a call names (``search_archives``), besides
    those of ``archives`` and ``DOCPROC_CHROMADB_URL``: see :attr:`allowed_archive_urls`."""
    archive_defaults: ArchiveDefaults = field(default_factory=ArchiveDefaults)
    """What an archive leaves out, after the seeds' environment variables (``RAG_DEFAULT_LAYER`` ...)."""

    @property
    def allowed_archive_urls(self) -> frozenset[str]:
        """The allow-list, normalised: ``archive_urls`` and every configured archive's server."""
        return frozenset(
            normalize_url(u) for u in (*self.archive_urls, *(a.chromadb_url for a in self.archives))
        )


PROMPT_FORMATS = ("chat", "plain")


def _check_llm_model(
    where: str,
    *,
    model: str,
    context_tokens: int,
    max_output_tokens: int,
    prompt_format: str,
    max_concurrent: int = 1,
) -> None:
    """The checks every chat model's settings share; errors name ``where`` and the key."""
    if not model.strip() or len(model) > 200:
        raise BadRequest(f"{where}.model must be 1..200 characters")
    if not 1 <= max_output_tokens < context_tokens:
        raise BadRequest(
            f"{where}.max_output_tokens ({max_output_tokens}) must be at least 1 and below "
            f"{where}.context_tokens ({context_tokens})"
        )
    if prompt_format not in PROMPT_FORMATS:
        raise BadRequest(f"{where}.prompt_format must be chat or plain, got {prompt_format!r:.40}")
    if not 1 <= max_concurrent <= 1024:
        raise BadRequest(f"{where}.max_concurrent must be 1..1024, got {max_concurrent}")


@dataclass(frozen=True)
class LlmOpenAIConfig:
    """One ``[[llm.openai]]`` table: a model on an OpenAI-compatible server."""

    base_url: str
    model: str
    context_tokens: int = 8192
    max_output_tokens: int = 1024
    api_key_env: str | None = None
    timeout_seconds: float = 60.0
    call_timeout_seconds: float = 600.0
    max_concurrent: int = 4
    prompt_format: str = "chat"
    stream_usage: bool = True

    def __post_init__(self) -> None:
        check_chroma_url(self.base_url, "llm.openai.base_url")
        _check_llm_model(
            "llm.openai",
            model=self.model,
            context_tokens=self.context_tokens,
            max_output_tokens=self.max_output_tokens,
            prompt_format=self.prompt_format,
            max_concurrent=self.max_concurrent,
        )


@dataclass(frozen=True)
class LlmLocalConfig:
    """``[llm.local]``: a GGUF model served by llama-cpp-python in a child process."""

    model_path: str
    model: str = "local"
    context_tokens: int = 2048
    max_output_tokens: int = 256
    threads: int | None = None
    port: int = 0
    timeout_seconds: float = 60.0
    call_timeout_seconds: float = 300.0
    start_timeout_seconds: float = 120.0
    prompt_format: str = "plain"

    def __post_init__(self) -> None:
        _check_llm_model(
            "llm.local",
            model=self.model,
            context_tokens=self.context_tokens,
            max_output_tokens=self.max_output_tokens,
            prompt_format=self.prompt_format,
        )
        if not 0 <= self.port <= 65535:
            raise BadRequest(f"llm.local.port must be 0..65535, got {self.port}")


@dataclass(frozen=True)
class LlmConfig:
    enabled: bool = True
    openai: tuple[LlmOpenAIConfig, ...] = ()
    local: LlmLocalConfig | None = None

    def __post_init__(self) -> None:
        names = [o.model for o in self.openai] + ([self.local.model] if self.local else [])
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise BadRequest(
                f"two llm models share the name {', '.join(dupes)}: give each its own model name"
            )


@dataclass(frozen=True)
class OcrConfig:
    enabled: bool = True
    """Serve ``ocr.page`` (off on a small device: its pages go to a peer that has OCR)."""
    max_concurrent: int = 1
    """Pages recognised at once; each takes a core and the engine's working memory (specs/ocr.md)."""
    dpi: int = 200
    """Resolution a PDF page is rendered at for OCR (at most 2000 pixels on its long side)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_concurrent <= 64:
            raise BadRequest(f"ocr.max_concurrent must be 1..64, got {self.max_concurrent}")
        if not 50 <= self.dpi <= 600:
            raise BadRequest(f"ocr.dpi must be 50..600, got {self.dpi}")


@dataclass(frozen=True)
class BlobConfig:
    cap_bytes: int | None = None


DEFAULT_SYSTEM_PROMPT = (
    "You are the assistant of a small community's shared library. Answer the question from the "
    "documents in the context below. After each statement taken from a document, cite it exactly as "
    "[file#chunk_id], copying the file and chunk id of the context line it comes from. If the context "
    "does not hold the answer, say that it is not in the documents. Answer in the language of the question."
)
DEFAULT_CONTEXT_HEADER = "Context:"
DEFAULT_CONTEXT_LINE = '- From {file}#{chunk_id} (page {page}): "{text}"'
DEFAULT_NO_CONTEXT_PROMPT = "You are a helpful assistant. Answer briefly."
DEFAULT_EXTRACTIVE_HEADER = (
    "No language model is reachable; these passages of the documents match the question:"
)
CONTEXT_LINE_FIELDS = frozenset({"file", "chunk_id", "page", "text", "title", "corpus"})


@dataclass(frozen=True)
class AnswerConfig:
    """The answer composer (``[answer]``): the seed's retrieval parameters and the prompt."""

    enabled: bool = True
    token_budget: int = 50_000
    """Most tokens of document context in one prompt (also bounded by the model's window)."""
    top_k_max: int = 40
    similarity_threshold: float = 0.2
    cache_ttl_seconds: float = 300.0
    cache_max_entries: int = 256
    retrieval_timeout_seconds: float = 6.0
    debug: bool = True
    short_question_chars: int = 10
    """The skip rule: a question shorter than this with no chunk above the threshold gets no context."""
    model: str | None = None
    """The ``llm.chat`` model to use; unset: the reachable one with the largest context window."""
    max_tokens: int = 1024
    temperature: float = 0.2
    llm_timeout_seconds: float = 120.0
    history_tokens: int = 4000
    """Most tokens of a session's earlier turns in one prompt (never more than half the room left)."""
    max_question_chars: int = 8192
    extractive_sentences: int = 4
    extractive_chunks: int = 5
    max_sessions: int = 1000
    max_turns: int = 200
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    context_header: str = DEFAULT_CONTEXT_HEADER
    context_line: str = DEFAULT_CONTEXT_LINE
    no_context_prompt: str = DEFAULT_NO_CONTEXT_PROMPT
    extractive_header: str = DEFAULT_EXTRACTIVE_HEADER
    rerank: bool = True
    """Reorder the chunks with a ``rerank.text`` provider when one is reachable."""
    rerank_model: str | None = None
    """The ``rerank.text`` model to use; unset: a reachable one (this node's first, then by name)."""
    rerank_candidates: int = 50
    """The best chunks after merge and threshold that the reranker orders (the rest follow unchanged)."""
    rerank_timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.rerank_candidates <= 256:
            raise BadRequest(
                "answer.rerank_candidates must be in 1..256 (rerank.text's limit), "
                f"got {self.rerank_candidates}"
            )
        if not 0.0 <= self.similarity_threshold <= 1.0:
            raise BadRequest(f"answer.similarity_threshold must be in 0..1, got {self.similarity_threshold}")
        if not 0.0 <= self.temperature <= 2.0:
            raise BadRequest(f"answer.temperature must be in 0..2, got {self.temperature}")
        if not 1 <= self.top_k_max <= 200:
            raise BadRequest(f"answer.top_k_max must be in 1..200, got {self.top_k_max}")
        if not 1 <= self.max_question_chars <= 8192:
            raise BadRequest("answer.max_question_chars must be in 1..8192 (rag.query's limit)")
        for name in ("token_budget", "cache_max_entries", "max_tokens", "history_tokens", "max_sessions"):
            if getattr(self, name) < (0 if name == "history_tokens" else 1):
                raise BadRequest(f"answer.{name} must be positive, got {getattr(self, name)}")
        for name in ("extractive_sentences", "extractive_chunks", "max_turns", "short_question_chars"):
            if getattr(self, name) < 0:
                raise BadRequest(f"answer.{name} must not be negative, got {getattr(self, name)}")
        check_context_line(self.context_line)


def check_context_line(template: str) -> str:
    """``answer.context_line`` must format with the chunk's fields only (checked at load, not per ask)."""
    import string

    try:
        names = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError as exc:
        raise BadRequest(f"answer.context_line is not a valid template: {exc}") from None
    unknown = sorted(n for n in names if n not in CONTEXT_LINE_FIELDS)
    if unknown or "" in names:
        raise BadRequest(
            f"answer.context_line may use only {{{'}, {'.join(sorted(CONTEXT_LINE_FIELDS))}}}, "
            f"got {', '.join(unknown) or 'a positional {}'}"
        )
    if "chunk_id" not in names or "text" not in names:
        raise BadRequest("answer.context_line must contain {chunk_id} and {text}: citations need the id")
    return template


UI_DEFAULT_PORT = 7780
UI_MAX_UPLOAD_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class UiConfig:
    """The web UI served by the node (``specs/ui.md``)."""

    enabled: bool = True
    listen_host: str = "127.0.0.1"
    listen_port: int = UI_DEFAULT_PORT
    listen_explicit: bool = False
    """``listen`` was given (file or environment): a taken port is an error, never the next one."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names, besides the listen address and loopback, that requests may name (DNS rebinding)."""
    max_upload_bytes: int = UI_MAX_UPLOAD_BYTES
    api_requests_per_minute: int = 600
    """Requests one API key may make to the gateway and MCP routes, on average (a token bucket)."""
    api_burst: int = 60
    """Requests one API key may make at once before the per-minute rate applies."""

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise BadRequest("ui.listen port must be 0..65535")
        if not 1 <= self.api_requests_per_minute <= 1_000_000 or not 1 <= self.api_burst <= 100_000:
            raise BadRequest("ui.api_requests_per_minute must be 1..1000000 and ui.api_burst 1..100000")


@dataclass(frozen=True)
class LogConfig:
    """The node's log file, ``<home>/logs/node.log``, beside stderr: rotated by size."""

    file: bool = True
    max_bytes: int = 10 * 1024 * 1024
    """A file reaching this size is renamed ``node.log.1`` (older ones shift up) and a new one begun."""
    backups: int = 5
    """Rotated files kept: at most ``(backups + 1) * max_bytes`` bytes of log on disk."""

    def __post_init__(self) -> None:
        if not 64 * 1024 <= self.max_bytes <= 1024 * 1024 * 1024:
            raise BadRequest(f"log.max_bytes must be between 64 KiB and 1 GiB, got {self.max_bytes}")
        if not 1 <= self.backups <= 100:
            raise BadRequest(f"log.backups must be between 1 and 100, got {self.backups}")


@dataclass(frozen=True)
class NodeConfig:
    home: Path
    name: str = "node"
    network: NetworkConfig = field(default_factory=NetworkConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    rag: RagConfig = field(default_factory=RagConfig)
    blobs: BlobConfig = field(default_factory=BlobConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    ocr: OcrConfig = field(default_factory=OcrConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    log_level: str = "info"
    log: LogConfig = field(default_factory=LogConfig)

    # paths inside the home ------------------------------------------------------
    @property
    def identity_path(self) -> Path:
        return self.home / "identity.key"

    @property
    def events_path(self) -> Path:
        return self.home / "events.sqlite3"

    @property
    def blobs_dir(self) -> Path:
        return self.home / "blobs"

    @property
    def rag_dir(self) -> Path:
        return self.home / "rag"

    @property
    def answer_path(self) -> Path:
        return self.home / "answer.sqlite3"

    @property
    def control_socket(self) -> Path:
        return self.home / "control.sock"

    @property
    def bootstrap_path(self) -> Path:
        return self.home / "bootstrap.json"

    @property
    def log_path(self) -> Path:
        return log_path(self.home)

    @property
    def revocation_path(self) -> Path:
        """This node's revocation as a refusing peer showed it (when the log could not store it)."""
        return self.home / "revoked.json"

    @property
    def ui_state_path(self) -> Path:
        """Where the running web UI writes its URL (``hearthnet ui`` reads it)."""
        return self.home / "ui.json"

    @property
    def ui_db_path(self) -> Path:
        """The web UI's token and session store (0600)."""
        return self.home / "ui.sqlite3"


def log_path(home: Path) -> Path:
    """The node's log file in ``home`` (rotated copies beside it: ``node.log.1`` ...)."""
    return home / "logs" / "node.log"


_KNOWN: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "name",
            "log_level",
            "network",
            "embedding",
            "rag",
            "blobs",
            "log",
            "llm",
            "answer",
            "ui",
            "ocr",
            "rerank",
        }
    ),
    "network": frozenset(
        {
            "listen",
            "advertise_host",
            "max_frame",
            "handshake_timeout",
            "keepalive_seconds",
            "dead_after_seconds",
        }
    ),
    "embedding": frozenset({"enabled", "model_dir", "threads", "openai", "timeout_seconds"}),
    "embedding.openai": frozenset(
        {"base_url", "model", "dim", "api_key_env", "max_tokens", "timeout_seconds"}
    ),
    "rag": frozenset(
        {
            "enabled",
            "chroma_url",
            "query_timeout_seconds",
            "embed_timeout_seconds",
            "accept_new_corpora",
            "embedding_model",
            "archives",
            "archive_urls",
        }
    ),
    "rag.archives": frozenset(
        {"name", "label", "collection_name", "chromadb_url", "embedding_model", "layer"}
    ),
    "blobs": frozenset({"cap_bytes"}),
    "log": frozenset({"file", "max_bytes", "backups"}),
    "answer": frozenset(f.name for f in dataclasses.fields(AnswerConfig)),
    "llm": frozenset({"enabled", "openai", "local"}),
    "llm.openai": frozenset(
        {
            "base_url",
            "model",
            "api_key_env",
            "context_tokens",
            "max_output_tokens",
            "timeout_seconds",
            "call_timeout_seconds",
            "max_concurrent",
            "prompt_format",
            "stream_usage",
        }
    ),
    "llm.local": frozenset(
        {
            "model_path",
            "model",
            "context_tokens",
            "max_output_tokens",
            "threads",
            "port",
            "timeout_seconds",
            "call_timeout_seconds",
            "start_timeout_seconds",
            "prompt_format",
        }
    ),
    "ui": frozenset(
        {"enabled", "listen", "allowed_hosts", "max_upload_bytes", "api_requests_per_minute", "api_burst"}
    ),
    "ocr": frozenset({"enabled", "max_concurrent", "dpi"}),
}
LOG_LEVELS = ("debug", "info", "warning", "error")


def _table(data: Any, name: str) -> Mapping[str, Any]:
    """A table of config.toml with only the keys this version knows (a typo is an error, not a
    setting silently left at its default)."""
    if not isinstance(data, dict):
        raise BadRequest(f"[{name}] in config.toml must be a table")
    unknown = sorted(str(k) for k in data if k not in _KNOWN[name])
    if unknown:
        where = f" in [{name}]" if name else ""
        raise BadRequest(
            f"unknown config key(s){where}: {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN[name]))})"
        )
    return data


def _get(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str) -> Any:
    """``table[key]``, or ``default`` if absent; another TOML type than ``kind`` is ``bad_request``
    (``bool`` is not an ``int``)."""
    if key not in table:
        return default
    value = table[key]
    wanted = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in wanted) or not isinstance(value, wanted):
        names = " or ".join("true/false" if k is bool else k.__name__ for k in wanted)
        raise BadRequest(f"{where}.{key} in config.toml must be {names}, got {value!r}")
    return value


def _seconds(
    table: Mapping[str, Any], key: str, default: float, where: str, name: str | None = None
) -> float:
    """``table[key]`` as a positive number of seconds (``default`` if absent); errors name ``name``."""
    return _positive_float(_get(table, key, (int, float), default, where), name or key)


@overload
def _int(table: Mapping[str, Any], key: str, default: int, low: int, where: str) -> int: ...
@overload
def _int(table: Mapping[str, Any], key: str, default: None, low: int, where: str) -> int | None: ...
def _int(table: Mapping[str, Any], key: str, default: int | None, low: int, where: str) -> int | None:
    """``table[key]`` as an integer of at least ``low`` (``default`` if absent)."""
    value: int | None = _get(table, key, int, default, where)
    if value is not None and value < low:
        raise BadRequest(f"{where}.{key} must be at least {low}, got {value}")
    return value


def check_log_level(level: str, name: str) -> str:
    if level.lower() not in LOG_LEVELS:
        raise BadRequest(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level.lower()


def check_chroma_url(url: str | None, name: str) -> str | None:
    """``None``, or an http(s) URL with a host and a valid port (checked here, not at first use)."""
    if url is None:
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number below 65536 raises here
    except ValueError as exc:
        raise BadRequest(f"{name} is not a valid URL: {url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"{name} must be an http(s) URL with a host, got {url!r}")
    return url


def _archives(rag_s: Mapping[str, Any], defaults: ArchiveDefaults) -> tuple[ArchiveConfig, ...]:
    """``[[rag.archives]]``: each table strict, its left-out keys from ``defaults``; names unique."""
    tables = _get(rag_s, "archives", list, [], "rag")
    if len(tables) > MAX_ARCHIVES:
        raise BadRequest(f"[[rag.archives]] in config.toml has {len(tables)} tables; at most {MAX_ARCHIVES}")
    out: list[ArchiveConfig] = []
    for i, raw in enumerate(tables, start=1):
        t = _table(raw, "rag.archives")
        where = f"[[rag.archives]] #{i} in config.toml"
        for required in ("name", "collection_name"):
            if required not in t:
                raise BadRequest(f"{where} needs {required}")
        archive = resolve_archive(
            name=_get(t, "name", str, None, "rag.archives"),
            collection_name=_get(t, "collection_name", str, None, "rag.archives"),
            label=_get(t, "label", str, None, "rag.archives"),
            chromadb_url=_get(t, "chromadb_url", str, None, "rag.archives"),
            embedding_model=_get(t, "embedding_model", str, None, "rag.archives"),
            layer=_get(t, "layer", str, None, "rag.archives"),
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
    urls = _get(rag_s, "archive_urls", list, [], "rag")
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


def config_from_mapping(
    home: Path, data: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> NodeConfig:
    """Build a config from a parsed TOML document (unknown keys and wrong types are an error).

    ``env`` gives the seeds' fallbacks of what a table leaves out (``DOCPROC_CHROMADB_URL``,
    ``RAG_DEFAULT_LAYER``, ``DOCPROC_TEI_EMBEDDINGS_URL`` ...): a value written in the file wins
    over them.  Overrides (``HEARTHNET_*``) are :func:`apply_env`'s.
    """
    env = {} if env is None else env
    defaults = archive_defaults(env)
    top = _table(data, "")
    net = _table(top.get("network", {}), "network")
    listen = _get(net, "listen", str, None, "network")
    listen_host, listen_port = (
        parse_listen(listen, "[network] listen in config.toml") if listen is not None else ("127.0.0.1", 0)
    )
    advertise_host = _get(net, "advertise_host", str, None, "network")
    if advertise_host is not None:
        check_host(advertise_host, "[network] advertise_host in config.toml")
    network = NetworkConfig(
        listen_host=listen_host,
        listen_port=listen_port,
        advertise_host=advertise_host,
        max_frame=_int(net, "max_frame", DEFAULT_MAX_FRAME, 1 << 16, "network"),
        handshake_timeout=_seconds(net, "handshake_timeout", 5.0, "network"),
        keepalive_seconds=_seconds(net, "keepalive_seconds", 10.0, "network"),
        dead_after_seconds=_seconds(net, "dead_after_seconds", 30.0, "network"),
    )
    emb = _table(top.get("embedding", {}), "embedding")
    backends = _get(emb, "openai", list, [], "embedding")
    openai = []
    for raw in backends:
        b = _table(raw, "embedding.openai")
        where = "embedding.openai"
        for required in ("model", "dim"):
            if required not in b:
                raise BadRequest(f"[[embedding.openai]] in config.toml needs {required}")
        base_url = _get(b, "base_url", str, None, where)
        openai.append(
            OpenAIBackendConfig(
                # the seeds' TEI fallback: DOCPROC_TEI_EMBEDDINGS_URL, else http://tei-embeddings:8080
                base_url=defaults.tei_url
                if base_url is None
                else check_server_url(base_url, "[[embedding.openai]] base_url in config.toml"),
                model=_get(b, "model", str, None, where),
                dim=_int(b, "dim", 0, 1, where),  # present: checked above
                api_key_env=_get(b, "api_key_env", str, None, where),
                max_tokens=_int(b, "max_tokens", 512, 1, where),
                timeout_seconds=_seconds(b, "timeout_seconds", 10.0, where),
            )
        )
    embedding = EmbeddingConfig(
        enabled=_get(emb, "enabled", bool, True, "embedding"),
        model_dir=_get(emb, "model_dir", str, None, "embedding"),
        threads=_int(emb, "threads", None, 1, "embedding"),
        openai=tuple(openai),
        timeout_seconds=_seconds(emb, "timeout_seconds", 10.0, "embedding", name="embedding.timeout_seconds"),
    )
    rag_s = _table(top.get("rag", {}), "rag")
    rag = RagConfig(
        enabled=_get(rag_s, "enabled", bool, True, "rag"),
        chroma_url=check_chroma_url(_get(rag_s, "chroma_url", str, None, "rag"), "rag.chroma_url"),
        query_timeout_seconds=_seconds(rag_s, "query_timeout_seconds", 5.0, "rag"),
        embed_timeout_seconds=_seconds(rag_s, "embed_timeout_seconds", 10.0, "rag"),
        accept_new_corpora=_get(rag_s, "accept_new_corpora", bool, True, "rag"),
        embedding_model=_get(rag_s, "embedding_model", str, "all-MiniLM-L6-v2", "rag"),
        archives=_archives(rag_s, defaults),
        archive_urls=_archive_urls(rag_s, env),
        archive_defaults=defaults,
    )
    blob_s = _table(top.get("blobs", {}), "blobs")
    blobs = BlobConfig(cap_bytes=_int(blob_s, "cap_bytes", None, 0, "blobs"))
    log_s = _table(top.get("log", {}), "log")
    log = LogConfig(
        file=_get(log_s, "file", bool, True, "log"),
        max_bytes=_get(log_s, "max_bytes", int, LogConfig.max_bytes, "log"),
        backups=_get(log_s, "backups", int, LogConfig.backups, "log"),
    )
    answer = _answer_config(_table(top.get("answer", {}), "answer"))
    llm = _llm_config(_table(top.get("llm", {}), "llm"))
    rerank = rerank_config(top.get("rerank", {}))
    ui = _ui_config(_table(top.get("ui", {}), "ui"))
    ocr_s = _table(top.get("ocr", {}), "ocr")
    ocr = OcrConfig(
        enabled=_get(ocr_s, "enabled", bool, True, "ocr"),
        max_concurrent=_int(ocr_s, "max_concurrent", 1, 1, "ocr"),
        dpi=_int(ocr_s, "dpi", 200, 50, "ocr"),
    )
    name = check_name(_get(top, "name", str, "node", "config"), "name in config.toml")
    return NodeConfig(
        home=home,
        name=name,
        network=network,
        embedding=embedding,
        rag=rag,
        blobs=blobs,
        answer=answer,
        llm=llm,
        ui=ui,
        ocr=ocr,
        rerank=rerank,
        log_level=check_log_level(_get(top, "log_level", str, "info", "config"), "log_level"),
        log=log,
    )


def _answer_config(table: Mapping[str, Any]) -> AnswerConfig:
    """``[answer]``: each key has the type of its default (a number of seconds is an int or a float)."""
    kw: dict[str, Any] = {}
    defaults = AnswerConfig()
    for f in dataclasses.fields(AnswerConfig):
        if f.name not in table:
            continue
        default = getattr(defaults, f.name)
        if f.name.endswith("_seconds"):
            kw[f.name] = _seconds(table, f.name, float(default), "answer", name=f"answer.{f.name}")
        elif isinstance(default, bool):
            kw[f.name] = _get(table, f.name, bool, default, "answer")
        elif isinstance(default, int):
            kw[f.name] = _int(table, f.name, default, 0, "answer")
        elif isinstance(default, float):
            kw[f.name] = float(_get(table, f.name, (int, float), default, "answer"))
        else:  # strings, and the model (unset by default)
            kw[f.name] = _get(table, f.name, str, default, "answer")
    return AnswerConfig(**kw)


_SEED_ANSWER_ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "RAG_TOKEN_BUDGET": ("token_budget", lambda text, name: _env_int({name: text}, name, 0, 1)),
    "RAG_TOP_K_MAX": ("top_k_max", lambda text, name: _env_int({name: text}, name, 0, 1)),
    "RAG_SIMILARITY_THRESHOLD": ("similarity_threshold", lambda text, name: _env_float(text, name)),
    "RAG_CACHE_TTL_SECONDS": ("cache_ttl_seconds", _positive_float),
    "RAG_TIMEOUT_SECONDS": ("retrieval_timeout_seconds", _positive_float),
    "RAG_DEBUG_MODE": ("debug", _bool),
}
"""The seed's environment names for the composer's parameters."""


def _env_float(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{name} must be a number, got {text!r}") from None
    if value != value:  # NaN
        raise BadRequest(f"{name} must be a number, got {text!r}")
    return value


def _llm_config(table: Mapping[str, Any]) -> LlmConfig:
    """``[llm]``, its ``[[llm.openai]]`` tables and ``[llm.local]``."""
    openai = []
    for raw in _get(table, "openai", list, [], "llm"):
        b = _table(raw, "llm.openai")
        where = "llm.openai"
        for required in ("base_url", "model"):
            if required not in b:
                raise BadRequest(f"[[llm.openai]] in config.toml needs {required}")
        openai.append(
            LlmOpenAIConfig(
                base_url=_get(b, "base_url", str, None, where),
                model=_get(b, "model", str, None, where),
                context_tokens=_int(b, "context_tokens", 8192, 2, where),
                max_output_tokens=_int(b, "max_output_tokens", 1024, 1, where),
                api_key_env=_get(b, "api_key_env", str, None, where),
                timeout_seconds=_seconds(b, "timeout_seconds", 60.0, where, "llm.openai.timeout_seconds"),
                call_timeout_seconds=_seconds(
                    b, "call_timeout_seconds", 600.0, where, "llm.openai.call_timeout_seconds"
                ),
                max_concurrent=_int(b, "max_concurrent", 4, 1, where),
                prompt_format=_get(b, "prompt_format", str, "chat", where),
                stream_usage=_get(b, "stream_usage", bool, True, where),
            )
        )
    local = None
    if "local" in table:
        b = _table(table["local"], "llm.local")
        where = "llm.local"
        if "model_path" not in b:
            raise BadRequest("[llm.local] in config.toml needs model_path (run 'make local-llm' to write it)")
        local = LlmLocalConfig(
            model_path=_get(b, "model_path", str, None, where),
            model=_get(b, "model", str, "local", where),
            context_tokens=_int(b, "context_tokens", 2048, 2, where),
            max_output_tokens=_int(b, "max_output_tokens", 256, 1, where),
            threads=_int(b, "threads", None, 1, where),
            port=_int(b, "port", 0, 0, where),
            timeout_seconds=_seconds(b, "timeout_seconds", 60.0, where, "llm.local.timeout_seconds"),
            call_timeout_seconds=_seconds(
                b, "call_timeout_seconds", 300.0, where, "llm.local.call_timeout_seconds"
            ),
            start_timeout_seconds=_seconds(
                b, "start_timeout_seconds", 120.0, where, "llm.local.start_timeout_seconds"
            ),
            prompt_format=_get(b, "prompt_format", str, "plain", where),
        )
    return LlmConfig(enabled=_get(table, "enabled", bool, True, "llm"), openai=tuple(openai), local=local)


LLM_ENV = (
    "HEARTHNET_LLM_BASE_URL",
    "HEARTHNET_LLM_MODEL",
    "HEARTHNET_LLM_API_KEY_ENV",
    "HEARTHNET_LLM_CONTEXT_TOKENS",
    "HEARTHNET_LLM_MAX_OUTPUT_TOKENS",
    "HEARTHNET_LLM_TIMEOUT_SECONDS",
    "HEARTHNET_LLM_MAX_CONCURRENT",
    "HEARTHNET_LLM_PROMPT_FORMAT",
)
"""One OpenAI-compatible model described by the environment (BASE_URL and MODEL required)."""


def _env_int(env: Mapping[str, str], name: str, default: int, low: int) -> int:
    text = env.get(name)
    if text is None:
        return default
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < low:
        raise BadRequest(f"{name} must be a whole number of at least {low}, got {text!r:.40}")
    return int(text)


def _llm_from_env(llm: LlmConfig, env: Mapping[str, str]) -> LlmConfig:
    if "HEARTHNET_LLM" in env:
        llm = replace(llm, enabled=_bool(env["HEARTHNET_LLM"], "HEARTHNET_LLM"))
    given = [name for name in LLM_ENV if name in env]
    if not given:
        return llm
    base_url, model = env.get("HEARTHNET_LLM_BASE_URL"), env.get("HEARTHNET_LLM_MODEL")
    if not base_url or not model:
        raise BadRequest(
            f"{given[0]} describes an llm model: set HEARTHNET_LLM_BASE_URL and HEARTHNET_LLM_MODEL too"
        )
    check_chroma_url(base_url, "HEARTHNET_LLM_BASE_URL")
    timeout = env.get("HEARTHNET_LLM_TIMEOUT_SECONDS")
    try:
        configured = next((o for o in llm.openai if o.model == model), None)
        base = configured or LlmOpenAIConfig(base_url=base_url, model=model)
        entry = replace(
            base,
            base_url=base_url,
            api_key_env=env.get("HEARTHNET_LLM_API_KEY_ENV") or base.api_key_env,
            context_tokens=_env_int(env, "HEARTHNET_LLM_CONTEXT_TOKENS", base.context_tokens, 2),
            max_output_tokens=_env_int(env, "HEARTHNET_LLM_MAX_OUTPUT_TOKENS", base.max_output_tokens, 1),
            timeout_seconds=base.timeout_seconds
            if timeout is None
            else _positive_float(timeout, "HEARTHNET_LLM_TIMEOUT_SECONDS"),
            max_concurrent=_env_int(env, "HEARTHNET_LLM_MAX_CONCURRENT", base.max_concurrent, 1),
            prompt_format=env.get("HEARTHNET_LLM_PROMPT_FORMAT", base.prompt_format),
        )
    except BadRequest as exc:
        raise BadRequest(f"{exc.message} (from the HEARTHNET_LLM_* variables)") from None
    others = tuple(o for o in llm.openai if o.model != model)
    return replace(llm, openai=(*others, entry))


def _ui_config(table: Mapping[str, Any]) -> UiConfig:
    listen = _get(table, "listen", str, None, "ui")
    host, port = (
        parse_listen(listen, "ui.listen in config.toml")
        if listen is not None
        else ("127.0.0.1", UI_DEFAULT_PORT)
    )
    hosts = _get(table, "allowed_hosts", list, [], "ui")
    for h in hosts:
        if not isinstance(h, str) or not h.strip() or any(c in h for c in " /:@"):
            raise BadRequest(f"ui.allowed_hosts in config.toml must be host names, got {h!r}")
    return UiConfig(
        enabled=_get(table, "enabled", bool, True, "ui"),
        listen_host=host,
        listen_port=port,
        listen_explicit=listen is not None,
        allowed_hosts=tuple(h.strip().lower() for h in hosts),
        max_upload_bytes=_int(table, "max_upload_bytes", UI_MAX_UPLOAD_BYTES, 1, "ui"),
        api_requests_per_minute=_int(table, "api_requests_per_minute", 600, 1, "ui"),
        api_burst=_int(table, "api_burst", 60, 1, "ui"),
    )


def apply_env(config: NodeConfig, env: Mapping[str, str]) -> NodeConfig:
    """Apply ``HEARTHNET_*`` (and the seeds' ``RAG_*_TIMEOUT_SECONDS``) overrides."""
    network, embedding, rag, blobs, log = (
        config.network,
        config.embedding,
        config.rag,
        config.blobs,
        config.log,
    )
    ui = config.ui
    if "HEARTHNET_UI" in env:
        ui = replace(ui, enabled=_bool(env["HEARTHNET_UI"], "HEARTHNET_UI"))
    if "HEARTHNET_UI_LISTEN" in env:
        host, port = parse_listen(env["HEARTHNET_UI_LISTEN"], "HEARTHNET_UI_LISTEN")
        ui = replace(ui, listen_host=host, listen_port=port, listen_explicit=True)
    ocr = config.ocr
    if "HEARTHNET_LISTEN" in env:
        host, port = parse_listen(env["HEARTHNET_LISTEN"], "HEARTHNET_LISTEN")
        network = replace(network, listen_host=host, listen_port=port)
    if "HEARTHNET_ADVERTISE_HOST" in env:
        advertise = check_host(env["HEARTHNET_ADVERTISE_HOST"], "HEARTHNET_ADVERTISE_HOST")
        network = replace(network, advertise_host=advertise)
    keepalive = env.get("HEARTHNET_KEEPALIVE_SECONDS")
    dead_after = env.get("HEARTHNET_DEAD_AFTER_SECONDS")
    if keepalive is not None or dead_after is not None:  # together: one alone may not fit the other's default
        network = replace(
            network,
            keepalive_seconds=network.keepalive_seconds
            if keepalive is None
            else _positive_float(keepalive, "HEARTHNET_KEEPALIVE_SECONDS"),
            dead_after_seconds=network.dead_after_seconds
            if dead_after is None
            else _positive_float(dead_after, "HEARTHNET_DEAD_AFTER_SECONDS"),
        )
    if "HEARTHNET_EMBEDDING" in env:
        embedding = replace(embedding, enabled=_bool(env["HEARTHNET_EMBEDDING"], "HEARTHNET_EMBEDDING"))
    if "HEARTHNET_MODEL_DIR" in env:
        embedding = replace(embedding, model_dir=env["HEARTHNET_MODEL_DIR"])
    if "HEARTHNET_RAG" in env:
        rag = replace(rag, enabled=_bool(env["HEARTHNET_RAG"], "HEARTHNET_RAG"))
    if "HEARTHNET_RAG_MODEL" in env:
        rag = replace(rag, embedding_model=env["HEARTHNET_RAG_MODEL"])
    if "HEARTHNET_CHROMA_URL" in env:
        url = check_chroma_url(env["HEARTHNET_CHROMA_URL"] or None, "HEARTHNET_CHROMA_URL")
        rag = replace(rag, chroma_url=url)
    if "RAG_QUERY_TIMEOUT_SECONDS" in env:
        rag = replace(
            rag,
            query_timeout_seconds=_positive_float(
                env["RAG_QUERY_TIMEOUT_SECONDS"], "RAG_QUERY_TIMEOUT_SECONDS"
            ),
        )
    if "RAG_EMBED_TIMEOUT_SECONDS" in env:
        t = _positive_float(env["RAG_EMBED_TIMEOUT_SECONDS"], "RAG_EMBED_TIMEOUT_SECONDS")
        rag = replace(rag, embed_timeout_seconds=t)
        embedding = replace(embedding, timeout_seconds=t)
    if "HEARTHNET_OCR" in env:
        ocr = replace(ocr, enabled=_bool(env["HEARTHNET_OCR"], "HEARTHNET_OCR"))
    if "HEARTHNET_BLOB_CAP_BYTES" in env:
        text = env["HEARTHNET_BLOB_CAP_BYTES"].strip()
        if not text.isdigit():
            raise BadRequest(f"HEARTHNET_BLOB_CAP_BYTES must be a number of bytes (0 or more), got {text!r}")
        blobs = replace(blobs, cap_bytes=int(text))
    if "HEARTHNET_LOG_FILE" in env:
        log = replace(log, file=_bool(env["HEARTHNET_LOG_FILE"], "HEARTHNET_LOG_FILE"))
    answer = config.answer
    seeded = {key: parse(env[var], var) for var, (key, parse) in _SEED_ANSWER_ENV.items() if var in env}
    if "HEARTHNET_ANSWER_MODEL" in env:
        seeded["model"] = env["HEARTHNET_ANSWER_MODEL"] or None
    if seeded:
        answer = replace(answer, **seeded)
    llm = _llm_from_env(config.llm, env)
    name = check_name(env["HEARTHNET_NAME"], "HEARTHNET_NAME") if "HEARTHNET_NAME" in env else config.name
    log_level = check_log_level(env.get("HEARTHNET_LOG_LEVEL", config.log_level), "HEARTHNET_LOG_LEVEL")
    return replace(
        config,
        name=name,
        log_level=log_level,
        log=log,
        network=network,
        embedding=embedding,
        rag=rag,
        blobs=blobs,
        answer=answer,
        llm=llm,
        ui=ui,
        ocr=ocr,
        rerank=rerank_from_env(config.rerank, env),
    )


def load_config(home: Path, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Read ``<home>/config.toml`` (if any) and apply environment overrides."""
    path = home / CONFIG_FILE
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise BadRequest(f"{path} is not valid TOML: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise BadRequest(f"{path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    environ = os.environ if env is None else env
    return apply_env(config_from_mapping(home, data, environ), environ)


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: backslash, quote and every control character escaped
    (a newline could otherwise start a table of its own), everything else as it is (an emoji
    stays one character; JSON's surrogate-pair escapes are not valid TOML)."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def default_config_text(*, name: str, listen: str) -> str:
    """The ``local`` preset written by ``hearthnet init`` (``name`` and ``listen`` checked as its flags)."""
    check_name(name, "--name")
    parse_listen(listen, "--listen")
    return (
        "# HearthNet node configuration (see specs/node.md)\n"
        f"name = {toml_string(name)}\n"
        'log_level = "info"\n\n'
        "[network]\n"
        f"listen = {toml_string(listen)}\n\n"
        "[embedding]\n"
        "enabled = true\n\n"
        "[rag]\n"
        "enabled = true\n"
        "query_timeout_seconds = 5.0\n"
        "embed_timeout_seconds = 10.0\n\n"
        "[ocr]\n"
        "enabled = true\n\n"
        "[blobs]\n\n"
        "[log]\n"
        "file = true                 # also write <home>/logs/node.log ('hearthnet logs' prints it)\n"
        "max_bytes = 10485760        # rotate at 10 MiB\n"
        "backups = 5                 # rotated files kept\n"
        "[ui]\n"
        "enabled = true\n"
        '# listen = "127.0.0.1:7780"  (the default: 7780, or the next free port)\n'
    )
