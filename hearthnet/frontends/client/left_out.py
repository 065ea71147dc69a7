"""Why corpora were left out of an answer, said the way ``query`` says it: the CLI's one
``(left out: …)`` note and the web UI's notice above the answer read the same sentences.

From ``answer.ask``'s ``meta``: each asked corpus that did not answer (``meta.corpora``: no such
corpus, its hosts offline since when, or the retrieval deadline) and each corpus the community
knows of whose hosts are all away (``meta.corpora_unreachable``).  ``shown`` makes a name from a
peer safe for where it is printed (the CLI's terminal escaping; the page escapes by itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hearthnet.contracts.base import Caller
from hearthnet.contracts.rag import host_label
from hearthnet.errors import BusError, Partition, Timeout
from hearthnet.frontends.client.corpora import explain_unreachable, seen_text

__all__ = ["failed_reasons", "left_out", "offline_reasons"]

Shown = Callable[[str], str]


def _same(text: str) -> str:
    return text


def offline_reasons(meta: Mapping[str, Any], shown: Shown = _same) -> list[str]:
    """Why each corpus of ``meta.corpora_unreachable`` was not searched: its hosts and since when
    they are offline (as ``query`` says it)."""
    out = []
    for corpus, info in sorted((meta.get("corpora_unreachable") or {}).items()):
        hosts = info.get("hosts") if isinstance(info, Mapping) else None
        where = " and ".join(
            f"{shown(host_label(str(h.get('node')), h.get('node_name')))}, which is {seen_text(h)}"
            for h in hosts or []
            if isinstance(h, Mapping)
        )
        out.append(
            f"corpus {shown(str(corpus))!r} is hosted on {where}"
            if where
            else f"corpus {shown(str(corpus))!r} is offline"
        )
    return out


async def failed_reasons(
    caller: Caller, meta: Mapping[str, Any], shown: Shown = _same
) -> list[tuple[str, BusError]]:
    """Why each corpus of ``meta.corpora`` that was asked did not answer, as an error to tell the
    user (``query``'s explanation: no such corpus, or its hosts offline since when)."""
    out: list[tuple[str, BusError]] = []
    for corpus, info in sorted((meta.get("corpora") or {}).items()):
        if not isinstance(info, Mapping) or info.get("status") == "ok":
            continue
        code = str(info.get("code") or "")
        name = shown(str(corpus))
        if info.get("status") == "timeout":
            out.append(
                (str(corpus), Timeout(f"corpus {name!r} did not answer within the retrieval deadline"))
            )
            continue
        exc: BusError = Partition(
            f"corpus {name!r} could not be searched" + (f" ({shown(code)})" if code else "")
        )
        if code in ("", "not_found", "partition") and ":" not in str(corpus):  # archive:, chat:attached
            try:
                explained = await explain_unreachable(caller, str(corpus), exc)
            except BusError:
                explained = exc
            exc = explained
        out.append((str(corpus), exc))
    return out


async def left_out(caller: Caller, meta: Mapping[str, Any], shown: Shown = _same) -> list[str]:
    """Every reason of the two kinds, asked corpora first."""
    failed = await failed_reasons(caller, meta, shown)
    return [exc.message for _, exc in failed] + offline_reasons(meta, shown)
