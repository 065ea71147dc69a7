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
from typing import Any

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
    if not f > 0:
        raise BadRequest(f"{name} must be positive, got {value!r}")
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


def _section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise BadRequest(f"[{name}] in config.toml must be a table")
    return value


def config_from_mapping(home: Path, data: Mapping[str, Any]) -> NodeConfig:
    """Build a config from a parsed TOML document (unknown keys are an error)."""
    known_top = {"name", "log_level", "network", "embedding", "rag", "blobs"}
    unknown = set(data) - known_top
    if unknown:
        raise BadRequest(f"unknown config key(s): {', '.join(sorted(unknown))}")
    try:
        net = _section(data, "network")
        listen_host, listen_port = _parse_listen(str(net["listen"])) if "listen" in net else ("127.0.0.1", 0)
        network = NetworkConfig(
            listen_host=listen_host,
            listen_port=listen_port,
            advertise_host=net.get("advertise_host"),
            max_frame=int(net.get("max_frame", DEFAULT_MAX_FRAME)),
            handshake_timeout=_positive_float(net.get("handshake_timeout", 5.0), "handshake_timeout"),
            keepalive_seconds=_positive_float(net.get("keepalive_seconds", 10.0), "keepalive_seconds"),
            dead_after_seconds=_positive_float(net.get("dead_after_seconds", 30.0), "dead_after_seconds"),
        )
        emb = _section(data, "embedding")
        openai = tuple(
            OpenAIBackendConfig(
                base_url=str(b["base_url"]),
                model=str(b["model"]),
                dim=int(b["dim"]),
                api_key_env=b.get("api_key_env"),
                max_tokens=int(b.get("max_tokens", 512)),
                timeout_seconds=_positive_float(b.get("timeout_seconds", 10.0), "timeout_seconds"),
            )
            for b in emb.get("openai", [])
        )
        embedding = EmbeddingConfig(
            enabled=bool(emb.get("enabled", True)),
            model_dir=emb.get("model_dir"),
            threads=int(emb["threads"]) if "threads" in emb else None,
            openai=openai,
            timeout_seconds=_positive_float(emb.get("timeout_seconds", 10.0), "embedding.timeout_seconds"),
        )
        rag_s = _section(data, "rag")
        rag = RagConfig(
            enabled=bool(rag_s.get("enabled", True)),
            chroma_url=rag_s.get("chroma_url"),
            query_timeout_seconds=_positive_float(
                rag_s.get("query_timeout_seconds", 5.0), "query_timeout_seconds"
            ),
            embed_timeout_seconds=_positive_float(
                rag_s.get("embed_timeout_seconds", 10.0), "embed_timeout_seconds"
            ),
            accept_new_corpora=bool(rag_s.get("accept_new_corpora", True)),
            embedding_model=str(rag_s.get("embedding_model", "all-MiniLM-L6-v2")),
        )
        blob_s = _section(data, "blobs")
        blobs = BlobConfig(cap_bytes=int(blob_s["cap_bytes"]) if "cap_bytes" in blob_s else None)
        return NodeConfig(
            home=home,
            name=str(data.get("name", "node")),
            network=network,
            embedding=embedding,
            rag=rag,
            blobs=blobs,
            log_level=str(data.get("log_level", "info")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRequest(f"invalid config.toml: {type(exc).__name__}: {exc}") from exc


def apply_env(config: NodeConfig, env: Mapping[str, str]) -> NodeConfig:
    """Apply ``HEARTHNET_*`` (and the seeds' ``RAG_*_TIMEOUT_SECONDS``) overrides."""
    network, embedding, rag, blobs = config.network, config.embedding, config.rag, config.blobs
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
        rag = replace(rag, chroma_url=env["HEARTHNET_CHROMA_URL"] or None)
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
    if "HEARTHNET_BLOB_CAP_BYTES" in env:
        blobs = replace(blobs, cap_bytes=int(env["HEARTHNET_BLOB_CAP_BYTES"]))
    name = env.get("HEARTHNET_NAME", config.name)
    log_level = env.get("HEARTHNET_LOG_LEVEL", config.log_level)
    return replace(
        config, name=name, log_level=log_level, network=network, embedding=embedding, rag=rag, blobs=blobs
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
        "[blobs]\n"
    )
