"""Node configuration: frozen, validated dataclasses from TOML plus ``HEARTHNET_*`` overrides.

Precedence: built-in defaults < ``<home>/config.toml`` < environment.  The
``local`` preset (the default written by ``hearthnet init``) listens on
127.0.0.1 with an ephemeral port, which is what tests and the demo want.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

from hearthnet.errors import BadRequest
from hearthnet.wire.frames import DEFAULT_MAX_FRAME

CONFIG_FILE = "config.toml"


def _parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise BadRequest(f"listen address must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


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


@dataclass(frozen=True)
class RagConfig:
    enabled: bool = True
    chroma_url: str | None = None
    query_timeout_seconds: float = 5.0
    embed_timeout_seconds: float = 10.0
    accept_new_corpora: bool = True
    embedding_model: str = "all-MiniLM-L6-v2"


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


@dataclass(frozen=True)
class NodeConfig:
    home: Path
    name: str = "node"
    network: NetworkConfig = field(default_factory=NetworkConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    rag: RagConfig = field(default_factory=RagConfig)
    blobs: BlobConfig = field(default_factory=BlobConfig)
    ocr: OcrConfig = field(default_factory=OcrConfig)
    log_level: str = "info"

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
    def control_socket(self) -> Path:
        return self.home / "control.sock"

    @property
    def bootstrap_path(self) -> Path:
        return self.home / "bootstrap.json"


_KNOWN: dict[str, frozenset[str]] = {
    "": frozenset({"name", "log_level", "network", "embedding", "rag", "blobs", "ocr"}),
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
        }
    ),
    "blobs": frozenset({"cap_bytes"}),
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


def config_from_mapping(home: Path, data: Mapping[str, Any]) -> NodeConfig:
    """Build a config from a parsed TOML document (unknown keys and wrong types are an error)."""
    top = _table(data, "")
    net = _table(top.get("network", {}), "network")
    listen = _get(net, "listen", str, None, "network")
    listen_host, listen_port = _parse_listen(listen) if listen is not None else ("127.0.0.1", 0)
    network = NetworkConfig(
        listen_host=listen_host,
        listen_port=listen_port,
        advertise_host=_get(net, "advertise_host", str, None, "network"),
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
        for required in ("base_url", "model", "dim"):
            if required not in b:
                raise BadRequest(f"[[embedding.openai]] in config.toml needs {required}")
        openai.append(
            OpenAIBackendConfig(
                base_url=_get(b, "base_url", str, None, where),
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
    )
    blob_s = _table(top.get("blobs", {}), "blobs")
    blobs = BlobConfig(cap_bytes=_int(blob_s, "cap_bytes", None, 0, "blobs"))
    ocr_s = _table(top.get("ocr", {}), "ocr")
    ocr = OcrConfig(
        enabled=_get(ocr_s, "enabled", bool, True, "ocr"),
        max_concurrent=_int(ocr_s, "max_concurrent", 1, 1, "ocr"),
        dpi=_int(ocr_s, "dpi", 200, 50, "ocr"),
    )
    name = _get(top, "name", str, "node", "config")
    return NodeConfig(
        home=home,
        name=name,
        network=network,
        embedding=embedding,
        rag=rag,
        blobs=blobs,
        ocr=ocr,
        log_level=check_log_level(_get(top, "log_level", str, "info", "config"), "log_level"),
    )


def apply_env(config: NodeConfig, env: Mapping[str, str]) -> NodeConfig:
    """Apply ``HEARTHNET_*`` (and the seeds' ``RAG_*_TIMEOUT_SECONDS``) overrides."""
    network, embedding, rag, blobs = config.network, config.embedding, config.rag, config.blobs
    ocr = config.ocr
    if "HEARTHNET_LISTEN" in env:
        host, port = _parse_listen(env["HEARTHNET_LISTEN"])
        network = replace(network, listen_host=host, listen_port=port)
    if "HEARTHNET_ADVERTISE_HOST" in env:
        network = replace(network, advertise_host=env["HEARTHNET_ADVERTISE_HOST"])
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
    name = env.get("HEARTHNET_NAME", config.name)
    if not name.strip():
        raise BadRequest("HEARTHNET_NAME must not be empty")
    log_level = check_log_level(env.get("HEARTHNET_LOG_LEVEL", config.log_level), "HEARTHNET_LOG_LEVEL")
    return replace(
        config,
        name=name,
        log_level=log_level,
        network=network,
        embedding=embedding,
        rag=rag,
        blobs=blobs,
        ocr=ocr,
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
    return apply_env(config_from_mapping(home, data), os.environ if env is None else env)


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
    """The ``local`` preset written by ``hearthnet init``."""
    _parse_listen(listen)
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
        "[blobs]\n"
    )
