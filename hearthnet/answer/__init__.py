"""The answer composer: retrieval over corpora, merge, token budget, prompt, citations, cache, sessions.

It sits above the services and reaches them only through the bus
(``rag.query``, ``embed.text``, ``llm.chat``); see ``specs/answer.md``.
"""

from hearthnet.answer.service import AnswerService

__all__ = ["AnswerService"]
