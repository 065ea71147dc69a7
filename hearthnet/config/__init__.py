"""The node's configuration: frozen, validated dataclasses from ``<home>/config.toml`` plus
``HEARTHNET_*`` overrides, one module per table family (:mod:`.node` holds :class:`NodeConfig`
and the loading).  The names below are what the rest of the node imports."""

from hearthnet.config.answer import AnswerConfig
from hearthnet.config.embedding import EmbeddingConfig, OpenAIBackendConfig
from hearthnet.config.llm import LlmConfig, LlmLocalConfig, LlmOpenAIConfig
from hearthnet.config.network import NetworkConfig
from hearthnet.config.node import (
    CONFIG_FILE,
    BlobConfig,
    LogConfig,
    NodeConfig,
    OcrConfig,
    apply_env,
    config_from_mapping,
    default_config_text,
    load_config,
    log_path,
)
from hearthnet.config.rag import RagConfig
from hearthnet.config.rerank import RerankConfig, RerankServerConfig
from hearthnet.config.ui import UI_DEFAULT_PORT, UI_MAX_UPLOAD_BYTES, UiConfig
from hearthnet.config.values import check_name, parse_listen, shown_name, toml_string

__all__ = [
    "CONFIG_FILE",
    "UI_DEFAULT_PORT",
    "UI_MAX_UPLOAD_BYTES",
    "AnswerConfig",
    "BlobConfig",
    "EmbeddingConfig",
    "LlmConfig",
    "LlmLocalConfig",
    "LlmOpenAIConfig",
    "LogConfig",
    "NetworkConfig",
    "NodeConfig",
    "OcrConfig",
    "OpenAIBackendConfig",
    "RagConfig",
    "RerankConfig",
    "RerankServerConfig",
    "UiConfig",
    "apply_env",
    "check_name",
    "config_from_mapping",
    "default_config_text",
    "load_config",
    "log_path",
    "parse_listen",
    "shown_name",
    "toml_string",
]
