"""The LLM service: ``llm.chat@1.0`` over OpenAI-compatible servers or an opt-in local llama.cpp.

Callers outside this package use only the names exported here.
"""

from hearthnet.contracts.llm import (
    CAPABILITY,
    MAX_MESSAGES,
    MAX_TOTAL_CHARS,
    ROLES,
    ChatRequest,
    estimate_prompt_tokens,
    estimate_tokens,
    validate_chat_input,
)
from hearthnet.services.llm.local import LocalChatBackend, LocalLlmConfig, LocalUnavailable
from hearthnet.services.llm.openai_backend import ChatCompletion, OpenAIChatBackend, OpenAIChatConfig, Usage
from hearthnet.services.llm.service import ChatBackend, LlmConfig, LlmService, chat_descriptor

__all__ = [
    "CAPABILITY",
    "MAX_MESSAGES",
    "MAX_TOTAL_CHARS",
    "ROLES",
    "ChatBackend",
    "ChatCompletion",
    "ChatRequest",
    "LlmConfig",
    "LlmService",
    "LocalChatBackend",
    "LocalLlmConfig",
    "LocalUnavailable",
    "OpenAIChatBackend",
    "OpenAIChatConfig",
    "Usage",
    "chat_descriptor",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "validate_chat_input",
]
