"""Python access to a running node, the same the CLI has (sync and async): the public face of
:mod:`hearthnet.frontends.client`.

    from hearthnet.client import Client
    with Client("~/.hearthnet") as c:             # or AsyncClient in async code
        out = c.call("rag.query", params={"corpus": "docs"}, input={"query": "..."})
        print(out.output["chunks"])
"""

from hearthnet.frontends.client.client import AsyncClient, BusError, CallResult, Client, resolve_home

__all__ = ["AsyncClient", "BusError", "CallResult", "Client", "resolve_home"]
