"""``[llm]``, its ``[[llm.openai]]`` tables and ``[llm.local]``: the chat models this node serves as
``llm.chat``; ``HEARTHNET_LLM`` and ``HEARTHNET_LLM_*`` describe one more (or override one)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hearthnet.config.values import (
    api_key,
    array_of_tables,
    check_unique_models,
    check_url,
    configured_or_new,
    described_server,
    env_int,
    get,
    integer,
    positive_float,
    seconds,
    switched,
    table,
    with_entry,
)
from hearthnet.errors import BadRequest

__all__ = [
    "KEYS",
    "LLM_ENV",
    "LOCAL_KEYS",
    "OPENAI_KEYS",
    "PROMPT_FORMATS",
    "LlmConfig",
    "LlmLocalConfig",
    "LlmOpenAIConfig",
    "check_llm_model",
    "llm_env",
    "llm_from",
]

KEYS = frozenset({"enabled", "openai", "local"})
OPENAI_KEYS = frozenset(
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
)
LOCAL_KEYS = frozenset(
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
)
PROMPT_FORMATS = ("chat", "plain")


def check_llm_model(where: str, settings: LlmOpenAIConfig | LlmLocalConfig, max_concurrent: int = 1) -> None:
    """The checks every chat model's settings share (an OpenAI-compatible server's, the local
    model's); errors name ``where`` and the key."""
    model, prompt_format = settings.model, settings.prompt_format
    context_tokens, max_output_tokens = settings.context_tokens, settings.max_output_tokens
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
    timeouts = (settings.timeout_seconds, settings.call_timeout_seconds)
    for name, value in zip(("timeout_seconds", "call_timeout_seconds"), timeouts, strict=True):
        if not 0 < value <= 86_400:
            raise BadRequest(f"{where}.{name} must be above 0 and at most 86400, got {value!r}")


@dataclass(frozen=True)
class LlmOpenAIConfig:
    """One ``[[llm.openai]]`` table: a model on an OpenAI-compatible server; ``llm.chat``'s
    backend takes it as it is (``OpenAIChatConfig``).

    ``timeout_seconds`` is how long the server may stay silent (connecting,
    before its first byte while it reads the prompt, between chunks);
    ``call_timeout_seconds`` bounds a whole answer (the descriptor's timeout).
    ``prompt_format = "plain"`` sends the conversation as one text prompt to
    ``/v1/completions`` (for base models, which have no chat template).
    """

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
        check_url(self.base_url, "llm.openai.base_url")
        check_llm_model("llm.openai", self, self.max_concurrent)

    def api_key(self, environ: Mapping[str, str] = os.environ) -> str | None:
        """The key from the variable ``api_key_env`` names; ``bad_request`` when it is not set."""
        return api_key(self.api_key_env, environ, f"llm model {self.model!r:.80}")

    @property
    def endpoint(self) -> str:
        """``/v1/chat/completions`` or ``/v1/completions`` under ``base_url`` (which may end in ``/v1``)."""
        base = self.base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        return base + ("/chat/completions" if self.prompt_format == "chat" else "/completions")


@dataclass(frozen=True)
class LlmLocalConfig:
    """``[llm.local]``: a GGUF model served by llama-cpp-python in a child process (the one class
    the config file, the node and the local backend share).  ``log_path`` is not a key of the
    file: the node sets it to its home's ``logs/llm-local.log``."""

    model_path: str | Path
    model: str = "local"
    context_tokens: int = 2048
    max_output_tokens: int = 256
    threads: int | None = None
    port: int = 0
    timeout_seconds: float = 60.0
    call_timeout_seconds: float = 300.0
    start_timeout_seconds: float = 120.0
    prompt_format: str = "plain"
    log_path: Path | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise BadRequest(f"llm.local.port must be 0..65535, got {self.port}")
        if self.threads is not None and self.threads < 1:
            raise BadRequest(f"llm.local.threads must be at least 1, got {self.threads}")
        if not 0 < self.start_timeout_seconds <= 3600:
            raise BadRequest("llm.local.start_timeout_seconds must be above 0 and at most 3600")
        check_llm_model("llm.local", self)  # what every chat model checks (window, timeouts, format)

    @property
    def model_file(self) -> Path:
        """``model_path`` with ``~`` expanded."""
        return Path(self.model_path).expanduser()

    def openai_config(self, port: int) -> LlmOpenAIConfig:
        """The child server on ``port`` as an OpenAI-compatible model.  llama-cpp-python's server
        runs one generation at a time (a second would interrupt or queue behind the first): the
        bus refuses the next caller with ``capacity_exceeded`` instead."""
        return LlmOpenAIConfig(
            base_url=f"http://127.0.0.1:{port}",
            model=self.model,
            context_tokens=self.context_tokens,
            max_output_tokens=self.max_output_tokens,
            timeout_seconds=self.timeout_seconds,
            call_timeout_seconds=self.call_timeout_seconds,
            max_concurrent=1,
            prompt_format=self.prompt_format,
        )


@dataclass(frozen=True)
class LlmConfig:
    enabled: bool = True
    openai: tuple[LlmOpenAIConfig, ...] = ()
    local: LlmLocalConfig | None = None

    def __post_init__(self) -> None:
        names = [o.model for o in self.openai] + ([self.local.model] if self.local else [])
        check_unique_models(names, "llm models")


def llm_from(llm_s: Mapping[str, Any]) -> LlmConfig:
    """``[llm]``, its ``[[llm.openai]]`` tables and ``[llm.local]``."""
    openai = []
    where = "llm.openai"
    for _, b in array_of_tables(llm_s, "openai", "llm", OPENAI_KEYS, ("base_url", "model")):
        openai.append(
            LlmOpenAIConfig(
                base_url=get(b, "base_url", str, None, where),
                model=get(b, "model", str, None, where),
                context_tokens=integer(b, "context_tokens", 8192, 2, where),
                max_output_tokens=integer(b, "max_output_tokens", 1024, 1, where),
                api_key_env=get(b, "api_key_env", str, None, where),
                timeout_seconds=seconds(b, "timeout_seconds", 60.0, where, "llm.openai.timeout_seconds"),
                call_timeout_seconds=seconds(
                    b, "call_timeout_seconds", 600.0, where, "llm.openai.call_timeout_seconds"
                ),
                max_concurrent=integer(b, "max_concurrent", 4, 1, where),
                prompt_format=get(b, "prompt_format", str, "chat", where),
                stream_usage=get(b, "stream_usage", bool, True, where),
            )
        )
    local = None
    if "local" in llm_s:
        b = table(llm_s["local"], "llm.local", LOCAL_KEYS)
        where = "llm.local"
        if "model_path" not in b:
            raise BadRequest("[llm.local] in config.toml needs model_path (run 'make local-llm' to write it)")
        local = LlmLocalConfig(
            model_path=get(b, "model_path", str, None, where),
            model=get(b, "model", str, "local", where),
            context_tokens=integer(b, "context_tokens", 2048, 2, where),
            max_output_tokens=integer(b, "max_output_tokens", 256, 1, where),
            threads=integer(b, "threads", None, 1, where),
            port=integer(b, "port", 0, 0, where),
            timeout_seconds=seconds(b, "timeout_seconds", 60.0, where, "llm.local.timeout_seconds"),
            call_timeout_seconds=seconds(
                b, "call_timeout_seconds", 300.0, where, "llm.local.call_timeout_seconds"
            ),
            start_timeout_seconds=seconds(
                b, "start_timeout_seconds", 120.0, where, "llm.local.start_timeout_seconds"
            ),
            prompt_format=get(b, "prompt_format", str, "plain", where),
        )
    return LlmConfig(enabled=get(llm_s, "enabled", bool, True, "llm"), openai=tuple(openai), local=local)


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


def llm_env(llm: LlmConfig, env: Mapping[str, str]) -> LlmConfig:
    """``HEARTHNET_LLM`` and one model described by the ``HEARTHNET_LLM_*`` variables (:data:`LLM_ENV`)."""
    llm = switched(llm, env, "HEARTHNET_LLM")
    described = described_server(env, "HEARTHNET_LLM", LLM_ENV, "an llm model")
    if described is None:
        return llm
    base_url, model = described
    check_url(base_url, "HEARTHNET_LLM_BASE_URL")
    timeout = env.get("HEARTHNET_LLM_TIMEOUT_SECONDS")
    try:
        base = configured_or_new(llm.openai, model, lambda: LlmOpenAIConfig(base_url=base_url, model=model))
        entry = replace(
            base,
            base_url=base_url,
            api_key_env=env.get("HEARTHNET_LLM_API_KEY_ENV") or base.api_key_env,
            context_tokens=env_int(env, "HEARTHNET_LLM_CONTEXT_TOKENS", base.context_tokens, 2),
            max_output_tokens=env_int(env, "HEARTHNET_LLM_MAX_OUTPUT_TOKENS", base.max_output_tokens, 1),
            timeout_seconds=base.timeout_seconds
            if timeout is None
            else positive_float(timeout, "HEARTHNET_LLM_TIMEOUT_SECONDS"),
            max_concurrent=env_int(env, "HEARTHNET_LLM_MAX_CONCURRENT", base.max_concurrent, 1),
            prompt_format=env.get("HEARTHNET_LLM_PROMPT_FORMAT", base.prompt_format),
        )
    except BadRequest as exc:
        raise BadRequest(f"{exc.message} (from the HEARTHNET_LLM_* variables)") from None
    return replace(llm, openai=with_entry(llm.openai, entry))
