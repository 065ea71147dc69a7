"""What goes into the prompt: the history within its share, then passages in rank order within what
the model's window leaves (:mod:`hearthnet.answer.budget`), costed once."""

from __future__ import annotations

from dataclasses import dataclass

from hearthnet.answer.budget import context_room, pack
from hearthnet.answer.hits import Hit
from hearthnet.answer.prompt import Turn, context_head, context_line, history_messages, system_text
from hearthnet.config import AnswerConfig
from hearthnet.contracts.llm import MESSAGE_OVERHEAD, REPLY_OVERHEAD, estimate_tokens

__all__ = ["Selection", "select"]


@dataclass
class Selection:
    """The prompt's parts chosen for one answer, and what each costs in tokens."""

    context: list[Hit]
    history: list[dict[str, str]]
    system: str
    tokens: dict[str, int]
    ranked: list[tuple[Hit, float]]


def select(
    cfg: AnswerConfig,
    question: str,
    ranked: list[tuple[Hit, float]],
    turns: list[Turn],
    window: int | None,
    max_tokens: int,
    with_context: bool,
) -> Selection:
    """History within its share, then chunks in rank order within what the model's ``window``
    (``None``: unknown, or no model) leaves."""
    instructions = system_text(cfg, [] if with_context else None)
    system_tokens = estimate_tokens(instructions) + MESSAGE_OVERHEAD + REPLY_OVERHEAD
    question_tokens = estimate_tokens(question) + MESSAGE_OVERHEAD
    history_budget = cfg.history_tokens
    if window is not None:
        history_budget = min(
            history_budget, max(0, window - system_tokens - question_tokens - max_tokens) // 2
        )
    history, history_tokens = history_messages(turns, history_budget)
    room = context_room(
        token_budget=cfg.token_budget,
        context_tokens=window,
        fixed_tokens=system_tokens + question_tokens + history_tokens,
        max_tokens=max_tokens,
    )
    lines: dict[str, str] = {}
    costs: dict[str, int] = {}

    def cost(item: tuple[Hit, float]) -> int:
        line = lines[item[0].chunk_id] = context_line(cfg.context_line, item[0])
        c = costs[item[0].chunk_id] = estimate_tokens(line) + 1  # the line and the newline before it
        return c

    kept, context_tokens = pack(
        ranked if with_context else [], budget=room, max_items=cfg.top_k_max, cost=cost
    )
    # What llm.chat checks against its window is the whole prompt's estimate.  A newline
    # ends every run the estimate counts, so the system message's estimate is its head's
    # plus its lines' (tests/unit/answer/test_budget.py): the prompt is summed from the
    # parts costed above, never counted again (on a 40-chunk prompt that took milliseconds).
    fixed = REPLY_OVERHEAD + MESSAGE_OVERHEAD + history_tokens + question_tokens
    head = estimate_tokens(context_head(cfg)) if with_context and kept else 0
    prompt = fixed + head + context_tokens
    while window is not None and kept and prompt + max_tokens > window:
        prompt -= costs[kept.pop()[0].chunk_id]
    context = [h for h, _ in kept]
    context_tokens = sum(costs[h.chunk_id] for h in context)
    if not context:  # no line: the system message is the instructions alone (costed above)
        prompt = fixed + system_tokens - MESSAGE_OVERHEAD - REPLY_OVERHEAD
    system = system_text(cfg, [lines[h.chunk_id] for h in context] if with_context else None)
    return Selection(
        context=context,
        history=history,
        system=system,
        tokens={
            "system": system_tokens,
            "history": history_tokens,
            "question": question_tokens,
            "context": context_tokens,
            "context_room": room,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "model_window": window or 0,
        },
        ranked=kept,
    )
