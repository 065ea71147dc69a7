"""OpenAI's request and response shapes, read and written for the gateway (pure functions).

Requests are checked field by field before anything is called: a field the gateway cannot
honour (tools, several choices, log-probabilities, images) is ``bad_request`` naming it, never
silently dropped; sampling hints it cannot pass on (``top_p``, penalties, ``seed``, ``user``)
are accepted and ignored, as a server free to ignore them may.  Limits are the capabilities'
own (``llm.chat``: 256 messages; ``embed.text``: 256 texts of 8,192 characters).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from hearthnet.contracts.answer import MAX_CORPORA
from hearthnet.errors import BadRequest, InternalError

__all__ = [
    "ChatRequest",
    "EmbeddingsRequest",
    "Turn",
    "chunk",
    "completion",
    "decode_embeddings",
    "embeddings_response",
    "parse_chat",
    "parse_embeddings",
]

MAX_MESSAGES = 256
MAX_TEXTS = 256
MAX_TEXT_CHARS = 8192
MAX_MODEL_NAME = 256

_IGNORED: Final = frozenset(
    {
        "user",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "metadata",
        "store",
        "service_tier",
        "logit_bias",
        "parallel_tool_calls",
        "reasoning_effort",
        "safety_identifier",
        "prompt_cache_key",
        "verbosity",
    }
)
"""Fields accepted and ignored: hints about sampling, billing or storage that change no answer's shape."""
_CHAT_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "stop",
        "n",
        "logprobs",
        "top_logprobs",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "response_format",
        "modalities",
        "corpora",
        "rag_config",
    }
)
_EMBEDDING_KEYS: Final = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
_ROLES: Final = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    """``llm.chat``'s messages (role system, user or assistant; text content)."""
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float | None
    stop: str | list[str] | None
    corpora: list[str] | None
    """Corpus names to answer from (``[]``: every corpus the caller may search); ``None``: not asked."""
    archives: list[Any] | None
    """``rag_config.archives`` entries to answer from; ``None``: not asked."""

    @property
    def rag(self) -> bool:
        """Answered by ``answer.ask`` (corpora or archives asked for) rather than ``llm.chat``."""
        return self.corpora is not None or bool(self.archives)

    def question_and_history(self) -> tuple[str, list[Turn]]:
        """What ``answer.ask`` is asked: the last message (the user's), and the earlier user and
        assistant messages as turns.  System messages are left out (the composer's own system
        prompt carries the documents); a user message with no answer joins the next question."""
        if not self.messages or self.messages[-1]["role"] != "user":
            raise FieldError(
                "messages", "with corpora or rag_config the last message must be the user's question"
            )
        turns: list[Turn] = []
        pending: list[str] = []
        for message in self.messages[:-1]:
            if message["role"] == "user":
                pending.append(message["content"])
            elif message["role"] == "assistant" and pending:
                turns.append(Turn("\n\n".join(pending), message["content"]))
                pending = []
        question = "\n\n".join([*pending, self.messages[-1]["content"]])
        if not question.strip():
            raise FieldError("messages", "messages: the user's question is empty")
        return question, turns


class FieldError(BadRequest):
    """``bad_request`` about one field of the request: OpenAI's error names it as ``param``."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    texts: list[str]
    base64: bool
    dimensions: int | None


def _given(body: Mapping[str, Any], key: str) -> Any:
    """A field's value; ``null`` counts as absent (clients send it for "not set")."""
    return body.get(key)


def _check_keys(body: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(str(k)[:40] for k in body if k not in allowed and k not in _IGNORED)
    if unknown:
        raise BadRequest(f"unrecognized request argument(s): {', '.join(unknown[:8])}")


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_NAME:
        raise FieldError(
            "model", f"model is required: a model name of 1..{MAX_MODEL_NAME} characters (GET /v1/models)"
        )
    return model


def _whole(value: Any, field: str, low: int) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < low:
        raise FieldError(field, f"{field} must be a whole number of at least {low}")
    return value


def _text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for i, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise FieldError("messages", f"{where}.content[{i}]: only text parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise FieldError("messages", f"{where}.content must be a string or a list of text parts")


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES:
        raise FieldError("messages", f"messages must be a list of 1..{MAX_MESSAGES} messages")
    out: list[dict[str, str]] = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise FieldError("messages", f"{where} must be an object")
        role = message.get("role")
        if role in ("tool", "function"):
            raise FieldError(
                "messages", f"{where}: tool messages are not supported (this gateway offers no tools)"
            )
        if role not in _ROLES:
            raise FieldError("messages", f"{where}.role must be system, developer, user or assistant")
        if message.get("tool_calls") or message.get("function_call"):
            raise FieldError("messages", f"{where}: tool calls are not supported")
        for key in message:
            if key not in ("role", "content", "name", "tool_calls", "function_call", "refusal"):
                raise FieldError("messages", f"{where}: unrecognized field {str(key)[:40]}")
        out.append({"role": _ROLES[role], "content": _text_of(message.get("content"), where)})
    return out


def _refuse_if_set(body: Mapping[str, Any], key: str, harmless: Sequence[Any], why: str) -> None:
    value = body.get(key)
    if value is not None and value not in harmless:
        raise FieldError(key, f"{key} is not supported: {why}")


def parse_chat(body: Mapping[str, Any]) -> ChatRequest:
    """``POST /v1/chat/completions``'s body, checked (``bad_request`` naming the field)."""
    _check_keys(body, _CHAT_KEYS)
    model = _model(body)
    messages = _messages(body.get("messages"))
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise FieldError("stream", "stream must be true or false")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict) or not stream:
            raise FieldError("stream_options", "stream_options is an object, given only with stream: true")
        flag = options.get("include_usage", False)
        if not isinstance(flag, bool):
            raise FieldError("stream_options", "stream_options.include_usage must be true or false")
        include_usage = flag
    max_tokens = _whole(_given(body, "max_tokens"), "max_tokens", 1)
    max_completion = _whole(_given(body, "max_completion_tokens"), "max_completion_tokens", 1)
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise FieldError("max_tokens", "max_tokens and max_completion_tokens differ: give one")
    temperature = _given(body, "temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or not 0 <= temperature <= 2
    ):
        raise FieldError("temperature", "temperature must be a number from 0 to 2")
    stop = _given(body, "stop")
    if stop is not None and not isinstance(stop, str | list):
        raise FieldError("stop", "stop must be a string or a list of strings")
    _refuse_if_set(body, "n", (1,), "one choice per request")
    _refuse_if_set(body, "logprobs", (False,), "no log-probabilities are available")
    _refuse_if_set(body, "top_logprobs", (0,), "no log-probabilities are available")
    _refuse_if_set(body, "tools", ([],), "this gateway offers no tools (use the MCP server at /mcp)")
    _refuse_if_set(body, "functions", ([],), "this gateway offers no tools")
    _refuse_if_set(body, "tool_choice", ("none",), "this gateway offers no tools")
    _refuse_if_set(body, "function_call", ("none",), "this gateway offers no tools")
    _refuse_if_set(body, "response_format", ({"type": "text"},), "answers are plain text")
    _refuse_if_set(body, "modalities", (["text"],), "answers are text")
    corpora = _corpora(body)
    archives = _archives(body)
    if (corpora is not None or archives) and stop is not None:
        raise FieldError("stop", "stop is not supported with corpora or rag_config (the answer is composed)")
    return ChatRequest(
        model=model,
        messages=messages,
        stream=bool(stream),
        include_usage=include_usage,
        max_tokens=max_completion if max_completion is not None else max_tokens,
        temperature=None if temperature is None else float(temperature),
        stop=stop,
        corpora=corpora,
        archives=archives,
    )


def _corpora(body: Mapping[str, Any]) -> list[str] | None:
    raw = body.get("corpora")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_CORPORA or not all(isinstance(c, str) for c in raw):
        raise FieldError("corpora", f"corpora must be a list of at most {MAX_CORPORA} corpus names")
    return sorted(set(raw))


def _archives(body: Mapping[str, Any]) -> list[Any] | None:
    """``rag_config.archives`` as given (checked entry by entry by ``rag.search_archives``); the seeds'
    rule: an absent, ``null`` or empty ``rag_config`` searches no archive."""
    raw = body.get("rag_config")
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise FieldError("rag_config", "rag_config must be an object {archives: [...]}")
    archives = raw.get("archives")
    if archives is None or archives == []:
        return None
    if not isinstance(archives, list):
        raise FieldError("rag_config", "rag_config.archives must be a list")
    for i, entry in enumerate(archives):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise FieldError("rag_config", f"rag_config.archives[{i}].name must be a string")
    return archives


def parse_embeddings(body: Mapping[str, Any]) -> EmbeddingsRequest:
    """``POST /v1/embeddings``'s body, checked."""
    _check_keys(body, _EMBEDDING_KEYS)
    model = _model(body)
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not 1 <= len(texts) <= MAX_TEXTS:
        raise FieldError("input", f"input must be a string or a list of 1..{MAX_TEXTS} strings")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise FieldError("input", f"input[{i}]: only text is supported, not token ids")
        if not text:
            raise FieldError("input", f"input[{i}] is empty")
        if len(text) > MAX_TEXT_CHARS:
            raise FieldError("input", f"input[{i}] is {len(text)} characters long; at most {MAX_TEXT_CHARS}")
    form = body.get("encoding_format") or "float"
    if form not in ("float", "base64"):
        raise FieldError("encoding_format", "encoding_format must be float or base64")
    dimensions = _whole(_given(body, "dimensions"), "dimensions", 1)
    return EmbeddingsRequest(model=model, texts=texts, base64=form == "base64", dimensions=dimensions)


def decode_embeddings(output: Mapping[str, Any], count: int) -> npt.NDArray[np.float32]:
    """``embed.text``'s packed float32 rows, checked against what was asked (``internal_error`` else)."""
    data, dim = output.get("embeddings"), output.get("dim")
    if not isinstance(data, bytes | bytearray) or type(dim) is not int or dim < 1:
        raise InternalError("embed.text answered without packed embeddings")
    if len(data) != count * dim * 4:
        raise InternalError(f"embed.text answered {len(data)} bytes for {count} vectors of {dim} dimensions")
    return np.frombuffer(bytes(data), dtype="<f4").reshape(count, dim)


def embeddings_response(
    model: str, vectors: npt.NDArray[np.float32], *, as_base64: bool, prompt_tokens: int
) -> dict[str, Any]:
    """OpenAI's embeddings list: float lists, or base64 of the float32 little-endian bytes."""
    data = []
    for i, row in enumerate(vectors):
        value: Any = (
            base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") if as_base64 else row.tolist()
        )
        data.append({"object": "embedding", "index": i, "embedding": value})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


def usage_of(raw: Any) -> dict[str, int] | None:
    """``llm.chat``'s usage as OpenAI writes it, or ``None`` when there is none."""
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if type(prompt) is not int or type(completion) is not int:
        return None
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion(
    cid: str,
    created: int,
    model: str,
    content: str,
    finish_reason: str,
    usage: dict[str, int] | None,
    extension: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion``."""
    doc: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "system_fingerprint": None,
    }
    if extension is not None:
        doc["hearthnet"] = extension
    return doc


def chunk(
    cid: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    *,
    usage: dict[str, int] | None = None,
    with_usage: bool = False,
    extension: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk``: ``delta`` ``None`` is the usage chunk (no choice)."""
    doc: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if with_usage:
        doc["usage"] = usage
    if extension is not None:
        doc["hearthnet"] = extension
    return doc
