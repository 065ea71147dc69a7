"""How a node hosts the composer: the service factory ``hearthnet node run`` gives the node
beside its own (the composer sits above the services, so the node does not import it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.answer.service import AnswerService

if TYPE_CHECKING:
    from hearthnet.node import NodeParts

__all__ = ["answer_service"]


def answer_service(parts: NodeParts) -> AnswerService | None:
    """The composer, on unless ``[answer] enabled = false``; it drops cached answers when the
    community stores events and when a corpus of this node changes."""
    cfg = parts.config.answer
    if not cfg.enabled:
        return None
    service = AnswerService(bus=parts.bus, config=cfg, sessions_path=parts.config.answer_path)
    parts.community.on_events(service.events_stored)
    parts.corpus_listeners.append(service.corpus_changed)
    return service
