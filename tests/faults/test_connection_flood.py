"""A flood of plain TCP connections from someone who is not a member must not kill the listener.

The listening process runs with only 64 file descriptors, so the flood makes
``accept`` fail with ``EMFILE``; afterwards a member's handshake must still
succeed on the same listener.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hearthnet.identity import Identity
from hearthnet.transport import initiate_link
from tests.faults.conftest import report

COMMUNITY = "hc1:flood"

_SERVER = textwrap.dedent(
    """
    import resource, sys
    import anyio
    from hearthnet.identity import Identity
    from hearthnet.transport import create_listener, listener_port, serve_links

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    async def echo(link):
        await link.send({"echo": await link.receive()})

    async def main():
        identity = Identity.generate()
        listener = await create_listener("127.0.0.1", 0)
        print(listener_port(listener), flush=True)
        await serve_links(listener, echo, identity=identity, community_id=sys.argv[1], admit=lambda _p: None)

    anyio.run(main)
    """
)


_REPO = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def starved_listener() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A process serving links on 127.0.0.1 with only 64 file descriptors; (process, port)."""
    with subprocess.Popen(
        [sys.executable, "-c", _SERVER, COMMUNITY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": _REPO},
    ) as server:  # leaving the block closes its pipes and waits for it
        try:
            assert server.stdout is not None
            yield server, int(server.stdout.readline())
        finally:
            server.kill()


@pytest.mark.anyio
async def test_a_connection_flood_does_not_end_the_listener(
    starved_listener: tuple[subprocess.Popen[str], int],
) -> None:
    server, port = starved_listener
    flood: list[socket.socket] = []
    try:
        for _ in range(150):  # far beyond the 64 descriptors the server may hold
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        with anyio.fail_after(20):  # the server is starved of descriptors: its accept fails
            while server.poll() is None and not _output_mentions(server, "accept_failed"):
                await anyio.sleep(0.05)
        assert server.poll() is None, f"the listener died: {server.stderr.read() if server.stderr else ''}"
        for s in flood:
            s.close()
        flood.clear()
        member = Identity.generate()
        deadline = time.monotonic() + 20
        while True:  # the listener backs off for at most a second between failed accepts
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
                link = await initiate_link(
                    stream, identity=member, community_id=COMMUNITY, admit=lambda _p: None, remote_address="t"
                )
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.1)
        async with link:
            await link.send({"hello": 1})
            assert await link.receive() == {"echo": {"hello": 1}}
        report("flood", "150 connections starved the listener of descriptors; a member still got in")
    finally:
        for s in flood:
            s.close()


_seen: dict[int, str] = {}


def _output_mentions(server: subprocess.Popen[str], word: str) -> bool:
    """Whether the server's stdout (where its logs go) so far mentions ``word``; never blocks."""
    import fcntl

    assert server.stdout is not None
    fd = server.stdout.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        chunk = b""
    _seen[server.pid] = _seen.get(server.pid, "") + chunk.decode(errors="replace")
    return word in _seen[server.pid]


@pytest.mark.anyio
async def test_before_proving_itself_a_peer_cannot_make_us_buffer_a_large_frame() -> None:
    from hearthnet.errors import BusError
    from hearthnet.transport import accept_link, memory_stream_pair
    from hearthnet.transport.link import HANDSHAKE_MAX_FRAME
    from hearthnet.wire.frames import HEADER

    ours, theirs = memory_stream_pair()
    async with theirs:  # ``ours`` is accept_link's to close
        await theirs.send(HEADER.pack(HANDSHAKE_MAX_FRAME + 1))  # a 'hello' larger than a handshake needs
        with anyio.fail_after(5), pytest.raises(BusError, match="maximum"):
            await accept_link(
                ours,
                identity=Identity.generate(),
                community_id=COMMUNITY,
                admit=lambda _p: None,
                remote_address="m",
            )
