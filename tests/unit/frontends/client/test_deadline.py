"""The client gives up on a node that never answers: ``timeout``, not a hang."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.abc
import pytest

from hearthnet.client import AsyncClient, Client
from hearthnet.errors import Timeout
from hearthnet.frontends.client import client as client_module


@pytest.mark.anyio
async def test_a_node_that_never_answers_is_a_timeout_for_every_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "ANSWER_GRACE_SECONDS", 0.2)
    home = tmp_path / "home"
    home.mkdir()
    listener = await anyio.create_unix_listener(home / "control.sock")

    async def silent(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await anyio.sleep_forever()  # a wedged node: takes the call, never answers

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        with anyio.fail_after(20):  # the test's own guard: the clients must give up long before
            with pytest.raises(Timeout, match="has not answered"):
                await AsyncClient(home).call("node.ping", timeout=0.1)
            with pytest.raises(Timeout):
                await anyio.to_thread.run_sync(lambda: Client(home).call("node.ping", timeout=0.1))
            with pytest.raises(Timeout):
                await anyio.to_thread.run_sync(lambda: list(Client(home).stream("file.fetch", timeout=0.1)))
        tg.cancel_scope.cancel()
