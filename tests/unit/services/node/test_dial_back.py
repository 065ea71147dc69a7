"""``node.dial_back`` dials only its caller's own advertised addresses, and tells open, refused
and silent ports apart (over real TCP on 127.0.0.1)."""

from __future__ import annotations

import socket

import anyio
import anyio.abc
import pytest

from hearthnet.errors import BadRequest
from hearthnet.services.node.probe import dial_back
from hearthnet.transport.probe import dial

CALLER = "ed25519:caller"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.anyio
async def test_an_advertised_listening_address_is_reachable() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener:
        address = f"127.0.0.1:{port}"
        out = await dial_back(CALLER, {"address": address}, lambda n: [address] if n == CALLER else [])
    assert out["reachable"] is True and out["reason"] == "ok" and out["address"] == address


@pytest.mark.anyio
async def test_a_port_nothing_listens_on_is_refused_not_reachable() -> None:
    out = await dial(f"127.0.0.1:{_free_port()}")
    assert out["reachable"] is False and out["reason"] == "refused"
    assert "nothing listens" in out["message"]


@pytest.mark.anyio
async def test_an_address_the_caller_does_not_advertise_is_never_dialled() -> None:
    with pytest.raises(BadRequest, match="only dials its caller's own addresses"):
        await dial_back(CALLER, {"address": "192.0.2.7:22"}, lambda n: ["10.0.0.2:7700"])
    with pytest.raises(BadRequest, match="needs input"):
        await dial_back(CALLER, {}, lambda n: [])
    with pytest.raises(BadRequest, match="not a host:port"):
        await dial("no-port-here")
