"""``[answer]``: the composer's retrieval parameters and its prompt; the seed's ``RAG_*`` variables
(``RAG_TOKEN_BUDGET``, ``RAG_TOP_K_MAX`` ...) and ``HEARTHNET_ANSWER_MODEL`` override them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hearthnet.config.values import env_float, env_int, flag, get, integer, positive_float, seconds
from hearthnet.errors import BadRequest

__all__ = [
    "CONTEXT_LINE_FIELDS",
    "DEFAULT_CONTEXT_HEADER",
    "DEFAULT_CONTEXT_LINE",
    "DEFAULT_EXTRACTIVE_HEADER",
    "DEFAULT_NO_CONTEXT_PROMPT",
    "DEFAULT_SYSTEM_PROMPT",
    "KEYS",
    "SEED_ENV",
    "AnswerConfig",
    "answer_env",
    "answer_from",
    "check_context_line",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are the assistant of a small community's shared library. Answer the question from the "
    "documents in the context below. After each statement taken from a document, cite it exactly as "
    "[file#chunk_id], copying the file and chunk id of the context line it comes from. If the context "
    "does not hold the answer, say that it is not in the documents. Answer in the language of the question."
)
DEFAULT_CONTEXT_HEADER = "Context:"
DEFAULT_CONTEXT_LINE = '- From {file}#{chunk_id} ({place}): "{text}"'
DEFAULT_NO_CONTEXT_PROMPT = "You are a helpful assistant. Answer briefly."
DEFAULT_EXTRACTIVE_HEADER = (
    "No language model is reachable; these passages of the documents match the question:"
)
CONTEXT_LINE_FIELDS = frozenset({"file", "chunk_id", "page", "place", "text", "title", "corpus"})


@dataclass(frozen=True)
class AnswerConfig:
    """The answer composer (``[answer]``): the seed's retrieval parameters and the prompt."""

    enabled: bool = True
    token_budget: int = 50_000
    """Most tokens of document context in one prompt (also bounded by the model's window)."""
    top_k_max: int = 40
    similarity_threshold: float = 0.2
    abstain_threshold: float = 0.37
    """Below this cosine of the best chunk to the question, the documents do not say: the answer
    abstains (no model is asked) and offers the nearest passages (calibrated in bench/answer.py)."""
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
    extractive_margin: float = 0.3
    """An extractive answer quotes a sentence only if its similarity is at least ``1 - margin`` of
    the best sentence's."""
    extractive_floor: float = 0.3
    """... and at least this cosine similarity to the question (the best sentence is always quoted)."""
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
        for name in ("extractive_margin", "extractive_floor", "abstain_threshold"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise BadRequest(f"answer.{name} must be in 0..1, got {getattr(self, name)}")
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


KEYS = frozenset(f.name for f in dataclasses.fields(AnswerConfig))


def answer_from(answer_s: Mapping[str, Any]) -> AnswerConfig:
    """``[answer]``: each key has the type of its default (a number of seconds is an int or a float)."""
    kw: dict[str, Any] = {}
    defaults = AnswerConfig()
    for f in dataclasses.fields(AnswerConfig):
        if f.name not in answer_s:
            continue
        default = getattr(defaults, f.name)
        if f.name.endswith("_seconds"):
            kw[f.name] = seconds(answer_s, f.name, float(default), "answer", name=f"answer.{f.name}")
        elif isinstance(default, bool):
            kw[f.name] = get(answer_s, f.name, bool, default, "answer")
        elif isinstance(default, int):
            kw[f.name] = integer(answer_s, f.name, default, 0, "answer")
        elif isinstance(default, float):
            kw[f.name] = float(get(answer_s, f.name, (int, float), default, "answer"))
        else:  # strings, and the model (unset by default)
            kw[f.name] = get(answer_s, f.name, str, default, "answer")
    return AnswerConfig(**kw)


SEED_ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "RAG_TOKEN_BUDGET": ("token_budget", lambda text, name: env_int({name: text}, name, 0, 1)),
    "RAG_TOP_K_MAX": ("top_k_max", lambda text, name: env_int({name: text}, name, 0, 1)),
    "RAG_SIMILARITY_THRESHOLD": ("similarity_threshold", lambda text, name: env_float(text, name)),
    "RAG_CACHE_TTL_SECONDS": ("cache_ttl_seconds", positive_float),
    "RAG_TIMEOUT_SECONDS": ("retrieval_timeout_seconds", positive_float),
    "RAG_DEBUG_MODE": ("debug", flag),
}
"""The seed's environment names for the composer's parameters."""


def answer_env(answer: AnswerConfig, env: Mapping[str, str]) -> AnswerConfig:
    """The seed's ``RAG_*`` names and ``HEARTHNET_ANSWER_MODEL``."""
    seeded = {key: parse(env[var], var) for var, (key, parse) in SEED_ENV.items() if var in env}
    if "HEARTHNET_ANSWER_MODEL" in env:
        seeded["model"] = env["HEARTHNET_ANSWER_MODEL"] or None
    return replace(answer, **seeded) if seeded else answer
