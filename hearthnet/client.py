"""Python access to a running node, the same the CLI has (sync and async): the public face of
:mod:`hearthnet.frontends.client`.

    from hearthnet.client import Client
    with Client("~/.hearthnet") as c:             # or AsyncClient in async code
        out = c.call("rag.query", params={"corpus": "docs"}, input={"query": "..."})
        print(out.output["chunks"])

``search_corpora(AsyncClient(...), ["docs", "ais"], "...", k=5)`` searches several corpora and
archives at once, merged into one ranking (by score for one embedding model, else by rank fusion).
"""

from hearthnet.contracts.retries import RETRY_FIRST_SECONDS as RETRY_FIRST_SECONDS
from hearthnet.contracts.retries import RETRY_MAX_SECONDS as RETRY_MAX_SECONDS
from hearthnet.contracts.retries import retry_wait as retry_wait
from hearthnet.frontends.client.client import ANSWER_GRACE_SECONDS as ANSWER_GRACE_SECONDS
from hearthnet.frontends.client.client import CAPACITY_RETRY_SECONDS as CAPACITY_RETRY_SECONDS
from hearthnet.frontends.client.client import KEEP_IDLE_SECONDS as KEEP_IDLE_SECONDS
from hearthnet.frontends.client.client import MAX_KEPT as MAX_KEPT
from hearthnet.frontends.client.client import AsyncClient, BusError, CallResult, Client, resolve_home
from hearthnet.frontends.client.client import StreamedCall as StreamedCall
from hearthnet.frontends.client.client import plain_output as plain_output
from hearthnet.frontends.client.search import CorpusAnswer, CorpusHit, MultiSearch, search_corpora

__all__ = [
    "AsyncClient",
    "BusError",
    "CallResult",
    "Client",
    "CorpusAnswer",
    "CorpusHit",
    "MultiSearch",
    "resolve_home",
    "search_corpora",
]
"""The public names (``tests/unit/test_public_api.py``); the module's other names of before this
was a face (``plain_output``, ``retry_wait``, ``StreamedCall``, the constants) stay importable."""
