"""``hearthnet corpus replicate|unreplicate|move``: hold a copy of a corpus another node hosts, give
it up, or hand a corpus's host role to an up-to-date replica (``specs/replicas.md``)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from hearthnet.contracts.rag import REPLICATE, RagClient
from hearthnet.errors import NotFound
from hearthnet.frontends.cli.args import corpus_arg
from hearthnet.frontends.cli.output import emit_text, plural
from hearthnet.frontends.client.client import AsyncClient, Client

__all__ = ["add_corpus", "own_replicas", "replica_lines"]

REPLICATE_TIMEOUT = 600.0
"""Seconds ``corpus replicate`` waits for the first copy (it goes on in the background after)."""


def _rag(args: argparse.Namespace, ask: Callable[[RagClient], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with AsyncClient(args.home) as client:
            return await ask(RagClient(client))

    return anyio.run(run)


def cmd_replicate(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    out = _rag(args, lambda rag: rag.replicate(corpus, timeout=REPLICATE_TIMEOUT))
    behind = int(out.get("behind") or 0)
    state = "up to date" if not behind else f"{plural(behind, 'document')} behind, copying"
    error = f" (last error: {out['error']})" if out.get("error") else ""
    emit_text(
        args,
        out,
        f"replicating {corpus} from {out.get('host')}: {plural(int(out.get('docs') or 0), 'document')} "
        f"held, {state}{error}",
    )


def cmd_unreplicate(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    out = _rag(args, lambda rag: rag.replicate(corpus, replicate=False))
    emit_text(
        args,
        out,
        f"no longer replicating {corpus}" if out.get("was") else f"{corpus} was not replicated here",
    )


def cmd_move(args: argparse.Namespace) -> None:
    corpus = corpus_arg(args.corpus)
    out = _rag(args, lambda rag: rag.move(corpus, args.to))
    emit_text(args, out, f"corpus {corpus} moved from {out['from']} to {out['to']} (event {out['event_id']})")


def own_replicas(client: Client) -> list[dict[str, Any]]:
    """The corpora this node replicates (``status``); none on a node without RAG."""
    try:
        return list(client.call(REPLICATE, input={}, timeout=10.0).output.get("replicas") or [])
    except NotFound:
        return []


def replica_lines(replicas: list[dict[str, Any]]) -> list[str]:
    """``status``'s lines about what this node replicates."""
    lines = []
    for r in replicas:
        behind = int(r.get("behind") or 0)
        state = "up to date" if not behind else f"{plural(behind, 'document')} behind"
        error = f", last error: {r['error']}" if r.get("error") else ""
        lines.append(
            f"replica of {r['corpus']} (host {r.get('host')}): "
            f"{plural(int(r.get('docs') or 0), 'document')}, {state}{error}"
        )
    return lines


def add_corpus(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("corpus", parents=[common], help="replicas of corpora: replicate, unreplicate, move")
    csub = p.add_subparsers(dest="corpus_command", required=True, metavar="ACTION")
    r = csub.add_parser(
        "replicate",
        parents=[common],
        help="hold a copy of a corpus another node hosts, following its signed events (trusted nodes)",
    )
    r.add_argument("corpus", help="the corpus to replicate (never personal)")
    r.set_defaults(func=cmd_replicate)
    u = csub.add_parser("unreplicate", parents=[common], help="stop replicating a corpus and drop the copy")
    u.add_argument("corpus", help="the corpus to give up")
    u.set_defaults(func=cmd_unreplicate)
    m = csub.add_parser(
        "move", parents=[common], help="make an up-to-date replica the corpus's host (anchors)"
    )
    m.add_argument("corpus", help="the corpus to move")
    m.add_argument("--to", required=True, metavar="NODE_ID", help="the replica to become its host (required)")
    m.set_defaults(func=cmd_move)
