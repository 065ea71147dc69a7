"""The node's configuration as one :class:`NodeConfig`: built-in defaults < ``<home>/config.toml`` <
environment (``HEARTHNET_*``, and the seeds' ``RAG_*`` names).  Each table family has its module
(:mod:`.network`, :mod:`.embedding`, :mod:`.rag` with :mod:`.archives`, :mod:`.llm`,
:mod:`.answer`, :mod:`.ui`, :mod:`.rerank`); the small ones (``[blobs]``, ``[log]``, ``[ocr]``)
and the top level are here.  The ``local`` preset (the default written by ``hearthnet init``)
listens on 127.0.0.1 with an ephemeral port, which is what tests and the demo want.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hearthnet.config.answer import KEYS as ANSWER_KEYS
from hearthnet.config.answer import AnswerConfig, answer_env, answer_from
from hearthnet.config.archives import archive_defaults
from hearthnet.config.embedding import KEYS as EMBEDDING_KEYS
from hearthnet.config.embedding import EmbeddingConfig, embedding_env, embedding_from
from hearthnet.config.llm import KEYS as LLM_KEYS
from hearthnet.config.llm import LlmConfig, llm_env, llm_from
from hearthnet.config.network import KEYS as NETWORK_KEYS
from hearthnet.config.network import NetworkConfig, advertise_entries, network_env, network_from
from hearthnet.config.rag import KEYS as RAG_KEYS
from hearthnet.config.rag import RagConfig, rag_env, rag_from
from hearthnet.config.rerank import RerankConfig, rerank_config, rerank_from_env
from hearthnet.config.ui import KEYS as UI_KEYS
from hearthnet.config.ui import UiConfig, ui_env, ui_from
from hearthnet.config.values import (
    check_log_level,
    check_name,
    flag,
    get,
    integer,
    parse_listen,
    positive_float,
    switched,
    table,
    toml_string,
)
from hearthnet.errors import BadRequest

__all__ = [
    "CONFIG_FILE",
    "BlobConfig",
    "LogConfig",
    "NodeConfig",
    "OcrConfig",
    "apply_env",
    "config_from_mapping",
    "default_config_text",
    "load_config",
    "log_path",
]

CONFIG_FILE = "config.toml"

KEYS: dict[str, frozenset[str]] = {
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
    "network": NETWORK_KEYS,
    "embedding": EMBEDDING_KEYS,
    "rag": RAG_KEYS,
    "blobs": frozenset({"cap_bytes"}),
    "log": frozenset({"file", "max_bytes", "backups"}),
    "answer": ANSWER_KEYS,
    "llm": LLM_KEYS,
    "ui": UI_KEYS,
    "ocr": frozenset({"enabled", "max_concurrent", "dpi"}),
}
"""The keys each top-level table of config.toml may hold (nested tables, and ``[rerank]`` whole:
their family's module)."""


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
    top = table(data, "", KEYS[""])

    def section(name: str) -> Mapping[str, Any]:
        return table(top.get(name, {}), name, KEYS[name])

    blob_s, log_s, ocr_s = section("blobs"), section("log"), section("ocr")
    return NodeConfig(
        home=home,
        name=check_name(get(top, "name", str, "node", "config"), "name in config.toml"),
        network=network_from(section("network")),
        embedding=embedding_from(section("embedding"), defaults),
        rag=rag_from(section("rag"), env, defaults),
        blobs=BlobConfig(cap_bytes=integer(blob_s, "cap_bytes", None, 0, "blobs")),
        answer=answer_from(section("answer")),
        llm=llm_from(section("llm")),
        ui=ui_from(section("ui")),
        ocr=OcrConfig(
            enabled=get(ocr_s, "enabled", bool, True, "ocr"),
            max_concurrent=integer(ocr_s, "max_concurrent", 1, 1, "ocr"),
            dpi=integer(ocr_s, "dpi", 200, 50, "ocr"),
        ),
        rerank=rerank_config(top.get("rerank", {})),
        log_level=check_log_level(get(top, "log_level", str, "info", "config"), "log_level"),
        log=LogConfig(
            file=get(log_s, "file", bool, True, "log"),
            max_bytes=get(log_s, "max_bytes", int, LogConfig.max_bytes, "log"),
            backups=get(log_s, "backups", int, LogConfig.backups, "log"),
        ),
    )


def apply_env(config: NodeConfig, env: Mapping[str, str]) -> NodeConfig:
    """Apply ``HEARTHNET_*`` (and the seeds' ``RAG_*``) overrides."""
    embed_timeout = None
    if "RAG_EMBED_TIMEOUT_SECONDS" in env:  # the one place it is read: rag's and the servers' timeout
        embed_timeout = positive_float(env["RAG_EMBED_TIMEOUT_SECONDS"], "RAG_EMBED_TIMEOUT_SECONDS")
    ocr, blobs, log = config.ocr, config.blobs, config.log
    ocr = switched(ocr, env, "HEARTHNET_OCR")
    if "HEARTHNET_BLOB_CAP_BYTES" in env:
        text = env["HEARTHNET_BLOB_CAP_BYTES"].strip()
        if not text.isdigit():
            raise BadRequest(f"HEARTHNET_BLOB_CAP_BYTES must be a number of bytes (0 or more), got {text!r}")
        blobs = replace(blobs, cap_bytes=int(text))
    if "HEARTHNET_LOG_FILE" in env:
        log = replace(log, file=flag(env["HEARTHNET_LOG_FILE"], "HEARTHNET_LOG_FILE"))
    name = check_name(env["HEARTHNET_NAME"], "HEARTHNET_NAME") if "HEARTHNET_NAME" in env else config.name
    log_level = check_log_level(env.get("HEARTHNET_LOG_LEVEL", config.log_level), "HEARTHNET_LOG_LEVEL")
    return replace(
        config,
        name=name,
        log_level=log_level,
        log=log,
        network=network_env(config.network, env),
        embedding=embedding_env(config.embedding, env, embed_timeout),
        rag=rag_env(config.rag, env, embed_timeout),
        blobs=blobs,
        answer=answer_env(config.answer, env),
        llm=llm_env(config.llm, env),
        ui=ui_env(config.ui, env),
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


def default_config_text(*, name: str, listen: str, advertise: Sequence[str] = ()) -> str:
    """The ``local`` preset written by ``hearthnet init`` (``name``, ``listen`` and each
    ``advertise`` entry checked as its flags)."""
    check_name(name, "--name")
    parse_listen(listen, "--listen")
    advertise_entries(list(advertise), "--advertise")
    advertised = (
        f"advertise = [{', '.join(toml_string(a.strip()) for a in advertise)}]\n"
        if advertise
        else '# advertise = ["100.64.0.7"]   # what peers dial (default: every interface\'s address)\n'
    )
    return (
        "# HearthNet node configuration (see specs/node.md)\n"
        f"name = {toml_string(name)}\n"
        'log_level = "info"\n\n'
        "[network]\n"
        f"listen = {toml_string(listen)}\n"
        f"{advertised}"
        "# discovery = true            # announce this node and find members on the LAN (mDNS)\n\n"
        "[embedding]\n"
        "enabled = true\n\n"
        "[rag]\n"
        "enabled = true\n"
        "query_timeout_seconds = 5.0\n"
        "embed_timeout_seconds = 10.0  # the least an embed.text call gets; bigger calls get more\n"
        "                              # (their size, the embedder's measured pace)\n\n"
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
