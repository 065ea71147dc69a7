"""Whether what ``answer.ask`` gave ``hearthnet ask`` is an answer, and what to tell the user when
it is not, or when some corpora were left out: the reasons are ``query``'s (no such corpus, or its
hosts offline since when), asked of the node through
:mod:`hearthnet.frontends.client.corpora`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hearthnet.errors import BusError, NotFound, Partition
from hearthnet.frontends.cli.output import shown
from hearthnet.frontends.client import left_out
from hearthnet.frontends.client.client import AsyncClient

__all__ = ["copy_notes", "failed_reasons", "failure", "offline_reasons", "verdict"]


def copy_notes(meta: Mapping[str, Any]) -> list[str]:
    """For each corpus a lagging replica answered: "corpus 'family': from a copy 2 documents behind"."""
    out = []
    for corpus, info in sorted((meta.get("corpora") or {}).items()):
        if not isinstance(info, Mapping) or not info.get("replica_of"):
            continue
        behind = info.get("behind")
        if type(behind) is int and behind > 0:
            out.append(
                f"corpus {shown(str(corpus))!r}: from a copy {behind} document{'s' if behind != 1 else ''} "
                f"behind (a replica on {shown(str(info.get('node')))}; its host "
                f"{shown(str(info['replica_of']))} is offline)"
            )
    return out


def offline_reasons(meta: Mapping[str, Any]) -> list[str]:
    """Why each corpus of ``meta.corpora_unreachable`` was not searched (escaped for a terminal)."""
    return left_out.offline_reasons(meta, shown)


async def failed_reasons(home: Path, meta: Mapping[str, Any]) -> list[tuple[str, BusError]]:
    """Why each asked corpus of ``meta.corpora`` did not answer (escaped for a terminal)."""
    return await left_out.failed_reasons(AsyncClient(home), meta, shown)


def verdict(output: Mapping[str, Any], *, named: bool, no_rag: bool) -> str | None:
    """Why this answer is no answer and the command fails, or ``None``:

    ``unsearched`` (corpora were named and none could be searched), ``no_model`` (``--no-rag``
    with no language model and no document attached), ``nothing`` (no model, and no corpus could
    be searched), ``empty`` (no model, and the corpora searched hold no documents: the answer
    abstained or quoted nothing)."""
    meta = output.get("meta") or {}
    corpora = {c: i for c, i in (meta.get("corpora") or {}).items() if isinstance(i, Mapping)}
    answered = {c: i for c, i in corpora.items() if i.get("status") == "ok"}
    if named and corpora and not answered:
        return "unsearched"
    if output.get("mode") == "abstained" and meta.get("model") is not None:
        return None  # a model was there: "the documents do not say" is the answer
    if output.get("mode") not in ("extractive", "abstained"):
        return None
    if no_rag and meta.get("skipped") == "no_rag":  # nothing searched (no document attached either)
        return "no_model"
    if meta.get("rag") in ("unavailable", "timeout"):
        return "nothing"
    if answered and not output.get("sources") and all(i.get("hits") == 0 for i in answered.values()):
        return "empty"
    return None


def failure(
    why: str, meta: Mapping[str, Any], failed: Sequence[tuple[str, BusError]], offline: Sequence[str]
) -> BusError:
    """The one error ``hearthnet ask`` ends with for a :func:`verdict`."""
    if why == "unsearched":
        if len(failed) == 1:
            return failed[0][1]
        return Partition("; ".join(exc.message for _, exc in failed))
    if why == "no_model":
        return NotFound(
            "no language model is reachable in the mesh, and --no-rag searches no document: configure "
            "[[llm.openai]] on a node (see README), or leave out --no-rag"
        )
    reasons = [exc.message for _, exc in failed] + list(offline)
    tail = f" ({'; '.join(reasons)})" if reasons else ""
    if why == "empty":
        searched = ", ".join(
            sorted(
                c
                for c, i in (meta.get("corpora") or {}).items()
                if isinstance(i, Mapping) and i.get("status") == "ok"
            )
        )
        return NotFound(
            f"nothing to answer from: no language model is reachable, and the corpora searched "
            f"({shown(searched)}) hold no documents{tail}: add some with 'hearthnet ingest'"
        )
    if not meta.get("corpora"):
        return NotFound(
            "nothing to answer from: no language model and no corpus are reachable"
            + (tail or " (see 'hearthnet status' and 'hearthnet corpora')")
        )
    return Partition(
        f"nothing to answer from: no language model is reachable and no corpus could be searched{tail}"
    )
