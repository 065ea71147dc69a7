"""TcpStream (hearthnet/transport/tcp_stream.py) on real loopback TCP: bytes, ends, errors, backpressure."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import select
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from hearthnet.errors import Partition, ProtocolError
from hearthnet.identity import Identity
from hearthnet.transport.link import Link, accept_link, open_link
from hearthnet.transport.tcp_stream import READ_HIGH, TcpStream, accept_tcp, connect_tcp

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[{}, {"use_uvloop": True}], ids=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    """Both loops the node may run on (``hearthnet node run`` uses uvloop when installed)."""
    return "asyncio", request.param


@asynccontextmanager
async def stream_pair() -> AsyncIterator[tuple[TcpStream, TcpStream]]:
    """A connected (client, server) pair over 127.0.0.1."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepted: list[anyio.abc.ByteStream] = []
        async with anyio.create_task_group() as tg:

            async def accept_one() -> None:
                accepted.append(await accept_tcp(listener))

            tg.start_soon(accept_one)
            client = await connect_tcp("127.0.0.1", port)
        server = accepted[0]
        assert isinstance(client, TcpStream) and isinstance(server, TcpStream)
        try:
            yield client, server
        finally:
            await client.aclose()
            await server.aclose()


async def read_exactly(stream: anyio.abc.ByteStream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        out += await stream.receive(1 << 20)
    return bytes(out)


async def test_bytes_arrive_in_order_both_ways() -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    async with stream_pair() as (client, server):
        async with anyio.create_task_group() as tg:

            async def send_all() -> None:
                for i in range(0, len(payload), 100_000):
                    await client.send(payload[i : i + 100_000])

            tg.start_soon(send_all)
            assert await read_exactly(server, len(payload)) == payload
        await server.send(b"back")
        assert await read_exactly(client, 4) == b"back"


async def test_receive_splits_at_max_bytes_and_keeps_the_rest() -> None:
    async with stream_pair() as (client, server):
        await client.send(b"abcdefghij")
        first = await server.receive(4)
        assert 1 <= len(first) <= 4
        rest = await read_exactly(server, 10 - len(first))
        assert first + rest == b"abcdefghij"


async def test_eof_after_all_data_then_end_of_stream() -> None:
    async with stream_pair() as (client, server):
        await client.send(b"last words")
        await client.send_eof()
        assert await read_exactly(server, 10) == b"last words"
        with pytest.raises(anyio.EndOfStream):
            await server.receive()
        with pytest.raises(anyio.EndOfStream):
            await server.receive()  # and it stays ended
        await server.send(b"half-closed: we may still write")
        assert await read_exactly(client, 31) == b"half-closed: we may still write"


async def test_local_close_fails_receive_and_send_with_closed() -> None:
    async with stream_pair() as (client, _server):
        await client.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await client.receive()
        with pytest.raises(anyio.ClosedResourceError):
            await client.send(b"x")
        assert client.try_write(b"x") is False


async def test_close_wakes_a_waiting_receive() -> None:
    async with stream_pair() as (client, _server):
        async with anyio.create_task_group() as tg:
            failures: list[BaseException] = []

            async def wait_for_data() -> None:
                try:
                    await client.receive()
                except BaseException as exc:
                    failures.append(exc)

            tg.start_soon(wait_for_data)
            await anyio.wait_all_tasks_blocked()
            await client.aclose()
        assert len(failures) == 1 and isinstance(failures[0], anyio.ClosedResourceError)


async def test_peer_abort_ends_receive_and_later_sends_fail() -> None:
    async with stream_pair() as (client, server):
        await server.aclose()  # abort: RST or FIN, depending on what was unread
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await client.receive()
        with pytest.raises((anyio.BrokenResourceError, anyio.ClosedResourceError)):
            with anyio.fail_after(10):
                while True:  # the first writes may still be accepted by the kernel
                    await client.send(b"x" * 65536)


async def test_a_second_concurrent_receive_is_refused() -> None:
    async with stream_pair() as (client, server):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.receive)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(anyio.BusyResourceError):
                await server.receive()
            await client.send(b"x")


async def test_a_cancelled_receive_loses_no_data() -> None:
    async with stream_pair() as (client, server):
        with anyio.move_on_after(0.05):
            await server.receive()
        await client.send(b"kept")
        assert await read_exactly(server, 4) == b"kept"


async def test_a_reader_that_stops_stalls_the_writer_with_bounded_buffers() -> None:
    """Backpressure: the receiver stops reading from the socket at READ_HIGH, the
    kernel buffers fill, and then the sender can no longer write without waiting."""
    block = os.urandom(256 * 1024)
    async with stream_pair() as (client, server):
        written = 0
        with anyio.fail_after(30):
            while client.try_write(block):
                written += 1
                assert written < 4096, "1 GiB accepted without backpressure"
                await anyio.lowlevel.checkpoint()  # let the receiver's protocol run
            protocol = server._protocol
            while not protocol.reading_paused:
                await anyio.lowlevel.checkpoint()
        assert protocol.buffered < READ_HIGH + len(block)
        # a send now waits until the reader drains; the data all arrives, in order
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.send, block)
            received = await read_exactly(server, (written + 1) * len(block))
        assert received == block * (written + 1)
        assert not protocol.reading_paused


async def test_socket_attributes() -> None:
    async with stream_pair() as (client, server):
        client_local = client.extra(anyio.abc.SocketAttribute.local_address)
        assert server.extra(anyio.abc.SocketAttribute.remote_address) == client_local
        assert client.extra(anyio.abc.SocketAttribute.remote_port) == server.extra(
            anyio.abc.SocketAttribute.local_port
        )


async def test_try_write_reports_what_waits_and_drain_waits_for_it() -> None:
    block = os.urandom(8 * 1024 * 1024)  # more than the kernel's buffers take at once
    async with stream_pair() as (client, server):
        assert client.try_write(block) is True
        assert client.write_pending  # the kernel took part; the rest waits in the transport
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.drain)
            assert await read_exactly(server, len(block)) == block
        assert not client.write_pending


@asynccontextmanager
async def tcp_links() -> AsyncIterator[tuple[Link, Link]]:
    """Two nodes linked over loopback TCP (handshake and encryption included): (initiator, responder)."""
    identity_a, identity_b = Identity.generate(), Identity.generate()
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepted: list[Link] = []

        async def accept_one() -> None:
            stream = await accept_tcp(listener)
            accepted.append(
                await accept_link(
                    stream, identity=identity_b, community_id="c", admit=lambda _: None, remote_address="a"
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(accept_one)
            a = await open_link(
                "127.0.0.1", port, identity=identity_a, community_id="c", admit=lambda _: None
            )
        try:
            yield a, accepted[0]
        finally:  # a failed test must not leave a shielded write waiting on a peer that never reads
            await a.aclose()
            await accepted[0].aclose()


def cap_socket_buffers(sender: Link, receiver: Link, size: int = 64 * 1024) -> None:
    """Fix the kernel's buffers between two links (Linux autotunes loopback buffers to megabytes):
    a blocked write then moves only a bounded amount each time the receiver reads."""
    for link, option in ((sender, socket.SO_SNDBUF), (receiver, socket.SO_RCVBUF)):
        sock = link._stream.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, option, size)


async def test_a_message_a_link_reported_sent_survives_an_abortive_close() -> None:
    """Link.send returns only when the kernel has the whole frame: closing right after drops nothing."""
    async with tcp_links() as (a, b):
        done: list[int] = []

        async def sender() -> None:
            with contextlib.suppress(Partition):
                for i in range(64):
                    await a.send({"i": i, "pad": b"x" * 900_000})
                    done.append(i)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            try:
                with anyio.fail_after(30):
                    while a.write_blocked_since is None:  # the peer is not reading: a send waits
                        await anyio.lowlevel.checkpoint()
                reported = len(done)
            finally:  # the only thing that ends the sender's shielded write, pass or fail
                await a.aclose()
        got: list[int] = []
        with contextlib.suppress(anyio.EndOfStream, Partition, ProtocolError):
            while True:
                got.append((await b.receive())["i"])
        await b.aclose()
        assert reported >= 1 and got[:reported] == list(range(reported))


@pytest.mark.anyio
async def test_the_address_of_a_socket_its_peer_reset_falls_back_to_the_default() -> None:
    """getpeername fails with ENOTCONN once the peer reset the connection; this used to escape
    from the accept path and end the node's networking."""
    import socket
    import struct

    from hearthnet.transport.link import socket_peer_address

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        client = socket.create_connection(("127.0.0.1", port))
        server = await accept_tcp(listener)
        assert socket_peer_address(server).startswith("127.0.0.1:")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST
        with anyio.fail_after(10), contextlib.suppress(anyio.BrokenResourceError, anyio.EndOfStream):
            await server.receive()  # returns (or fails) once the reset has arrived
        after = socket_peer_address(server, default="gone")  # asyncio: gone; uvloop kept the name
        assert after == "gone" or after.startswith("127.0.0.1:")
        await server.aclose()


@pytest.mark.anyio
async def test_a_handshake_that_fails_unexpectedly_never_ends_the_accept_loop() -> None:
    from hearthnet.transport.tcp import accept_forever

    calls: list[int] = []
    second = anyio.Event()

    async def handshake(stream: anyio.abc.ByteStream) -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("a bug in one connection's handshake")
        second.set()
        await anyio.aclose_forcefully(stream)

    async def serve(link: object) -> None:
        raise AssertionError("no link is made here")

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(accept_forever, listener, handshake, serve)
            for _ in range(2):
                async with await anyio.connect_tcp("127.0.0.1", port):
                    pass
            with anyio.fail_after(10):
                await second.wait()
            tg.cancel_scope.cancel()
    assert calls == [0, 1]


@pytest.mark.anyio
async def test_a_slow_reader_is_not_a_stalled_one() -> None:
    """A write may take longer than the liveness limit on a slow link: the stall clock restarts
    whenever less is left to send than at the last look, and runs on while nothing moves."""
    async with tcp_links() as (a, b):

        async def sender() -> None:
            with contextlib.suppress(Partition):
                for i in range(64):
                    await a.send({"i": i, "pad": b"x" * 900_000})

        cap_socket_buffers(a, b)  # the write b's reads resume cannot finish between two looks
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender)
            try:
                with anyio.fail_after(30):
                    while a.write_blocked_since is None:  # b is not reading: a's write waits
                        await anyio.lowlevel.checkpoint()
                start = a.write_blocked_since
                assert start is not None
                # (start + 100) - start is not always exactly 100 in floating point: compare with a tolerance
                assert a.write_stalled_for(start + 100) == pytest.approx(100, abs=1e-6)  # nothing moved yet
                assert a.write_stalled_for(start + 200) == pytest.approx(200, abs=1e-6)
                raw = b._stream  # read raw bytes, a little at a time: the same write goes on
                with anyio.fail_after(30):
                    while True:
                        await raw.receive(16_384)
                        assert a.write_blocked_since is not None  # still the one write
                        if a.write_stalled_for(start + 300) == 0.0:
                            break
                assert a.write_blocked_since == start + 300  # progress restarted the clock
                assert a.write_stalled_for(start + 400) == pytest.approx(100, abs=1e-6)  # runs on while stuck
            finally:  # the only thing that ends the sender's shielded write, pass or fail
                await a.aclose()
            tg.cancel_scope.cancel()
        await b.aclose()


async def read_end(client: socket.socket) -> bytes:
    """The next byte the client reads, ``b""`` at its end (read when the loop says it is there)."""
    client.setblocking(False)
    with anyio.fail_after(10):
        return await asyncio.get_running_loop().sock_recv(client, 1)


async def test_a_cancel_landing_after_a_connection_was_accepted_closes_that_connection() -> None:
    """The accept can complete in the loop turn before the accepting task is cancelled (a node
    stopping while a peer dials): the connection it got is closed, not dropped for the garbage
    collector (a ResourceWarning, and a peer left waiting on a half-open socket)."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        raw = listener.extra(anyio.abc.SocketAttribute.raw_socket)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepting = asyncio.ensure_future(accept_tcp(listener))
        await anyio.lowlevel.checkpoint()  # one turn: the accept's first step watches the socket
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            # each turn this task runs first; the turn after the loop took the connection off the
            # backlog (the socket is no longer readable), cancel before the accept's task wakes
            with anyio.fail_after(10):
                while select.select([raw], [], [], 0)[0]:
                    await anyio.lowlevel.checkpoint()
            accepting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await accepting
            assert await read_end(client) == b""  # the server side was closed
        finally:
            client.close()


async def test_a_cancel_landing_as_the_listener_turns_readable_loses_no_connection() -> None:
    """The other order: the cancel lands in the loop turn that reports the listener readable,
    before the accept's reader runs.  The cancelled accept takes nothing (the next one gets the
    connection), or closes what it took; nothing is left for the garbage collector."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        raw = listener.extra(anyio.abc.SocketAttribute.raw_socket)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepting = asyncio.ensure_future(accept_tcp(listener))
        await anyio.lowlevel.checkpoint()  # one turn: the accept's first step watches the socket
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            await anyio.lowlevel.checkpoint()  # next turn: this task runs before the reader's callback
            accepting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await accepting
            if select.select([raw], [], [], 0)[0]:  # it was left for the next accept
                await (await accept_tcp(listener)).aclose()
            else:  # it was taken, and closed: the client reads its end
                assert await read_end(client) == b""
        finally:
            client.close()
        gc.collect()  # a dropped socket would warn here (warnings are errors)
