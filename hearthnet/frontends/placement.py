"""Which node hosts a corpus: the one rule every front door follows when it ingests a document."""

from __future__ import annotations

import time
from typing import Any

from hearthnet.errors import BadRequest, NotFound
from hearthnet.services.rag.names import PERSONAL, host_label

__all__ = ["corpus_host", "seen_text"]


def seen_text(host: dict[str, Any]) -> str:
    """``offline since <when> (<how long> ago)``, or ``not connected`` when unknown."""
    last = host.get("last_seen")
    if not isinstance(last, int | float):
        return "not connected"
    ago = max(0.0, time.time() - float(last))
    if ago < 120:
        span = f"{ago:.0f} s"
    elif ago < 7200:
        span = f"{ago / 60:.0f} min"
    elif ago < 172800:
        span = f"{ago / 3600:.0f} h"
    else:
        span = f"{ago / 86400:.0f} days"
    return f"offline since {time.strftime('%Y-%m-%d %H:%M', time.localtime(last))} ({span} ago)"


def corpus_host(status: dict[str, Any], corpus: str, on: str | None, hosts: list[dict[str, Any]]) -> str:
    """Where to ingest into ``corpus``: its host (the largest copy if a name was given twice), else
    ``on``, this node, or any node accepting new corpora.

    ``status`` is this node's ``node.status``; ``hosts`` the corpus's hosting entries of
    ``rag.known_corpora`` (offline ones included).  A corpus name is one corpus in the
    community: ``on`` naming another node than the corpus's host, or a host that is offline,
    is refused before any file is copied.  The personal corpus always stays on this node.
    """
    own = str(status["node_id"])
    if corpus == PERSONAL:
        if on and on != own:
            raise BadRequest("the personal corpus stays on this node: --on cannot name another node")
        return own  # never push a personal document to a peer, whatever it advertises
    caps = status["capabilities"]
    if (
        on
        and on != own
        and not any(c["node"] == on and c["capability"].startswith("rag.ingest@") for c in caps)
    ):
        raise NotFound(
            f"node {on} does not offer rag.ingest to this node (not connected, or not running rag): "
            "see 'hearthnet status'"
        )
    if hosts:
        if on is not None and on in {h["node"] for h in hosts}:
            return on
        serving = [h for h in hosts if h["serving"]]
        if on is None and serving:
            return str(max(serving, key=lambda h: (h["chunks"], h["node"] == own))["node"])
        host = (serving or hosts)[0]
        state = "" if host["serving"] else f", which is {seen_text(host)}"
        raise BadRequest(
            f"corpus {corpus} already exists on node {host_label(host['node'], host.get('node_name'))}"
            f"{state}: a corpus name is one corpus in the community; ingest into it there"
            + (f" (--on {host['node']})" if host["serving"] else " when it is back")
            + " or choose another name"
        )
    if on:
        return on
    ingesters = [c for c in caps if c["capability"].startswith("rag.ingest@")]
    if any(c["node"] == own for c in ingesters):
        return own
    accepting = [c["node"] for c in ingesters if c["params"].get("accepts_new")]
    if accepting:
        return str(accepting[0])
    raise NotFound(
        f"no node in the mesh hosts corpus {corpus} or accepts new corpora (is any node running rag?)"
    )
