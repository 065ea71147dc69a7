"""Which node hosts a corpus: the one rule every front door follows when it ingests a document."""

from __future__ import annotations

from typing import Any

from hearthnet.errors import BadRequest, NotFound
from hearthnet.services.rag.names import PERSONAL

__all__ = ["corpus_host"]


def corpus_host(status: dict[str, Any], corpus: str, on: str | None = None) -> str:
    """Where to ingest into ``corpus``, from this node's ``node.status``.

    ``on`` if given (it must offer ``rag.ingest`` to this node); else the node that holds the
    corpus (this one first); else this node if it runs RAG; else any node accepting new
    corpora.  The personal corpus always stays on this node.
    """
    own = str(status["node_id"])
    if corpus == PERSONAL:
        if on and on != own:
            raise BadRequest("the personal corpus stays on this node: --on cannot name another node")
        return own  # never push a personal document to a peer, whatever it advertises
    caps = status["capabilities"]
    if on:
        if on != own and not any(c["node"] == on and c["capability"].startswith("rag.ingest@") for c in caps):
            raise NotFound(
                f"node {on} does not offer rag.ingest to this node (not connected, or not running rag): "
                "see 'hearthnet status'"
            )
        return on
    holders = [
        c["node"]
        for c in caps
        if c["capability"].startswith("rag.query@") and c["params"].get("corpus") == corpus
    ]
    if holders:
        return str(own if own in holders else holders[0])
    ingesters = [c for c in caps if c["capability"].startswith("rag.ingest@")]
    if any(c["node"] == own for c in ingesters):
        return own
    accepting = [c["node"] for c in ingesters if c["params"].get("accepts_new")]
    if accepting:
        return str(accepting[0])
    raise NotFound(
        f"no node in the mesh hosts corpus {corpus} or accepts new corpora (is any node running rag?)"
    )
