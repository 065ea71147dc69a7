"""A TCP (or Unix) byte stream on an asyncio protocol: anyio's ``ByteStream``, with less work per call.

anyio's ``SocketStream`` stops and restarts reading around every ``receive``
(two ``epoll_ctl`` calls each time) and yields to the event loop after every
``send``.  Links call both once per message, so on a busy link that
bookkeeping cost more than the encryption.  :class:`TcpStream` keeps reading
until ``READ_HIGH`` bytes wait unread (then pauses the socket: backpressure is
kept, the kernel's receive buffer and TCP's window hold the rest), returns
what has arrived without waiting, and writes at once.  Like anyio's stream,
``send`` returns only when the kernel has taken every byte (the transport's
write buffer limit is 0), so closing with ``abort`` never drops a message a
sender saw as sent, and a peer that stops reading stalls its sender instead of
filling memory.

Errors are anyio's: ``EndOfStream`` after the peer's clean close (and every
byte before it was read), ``BrokenResourceError`` when the connection broke,
``ClosedResourceError`` after ``aclose``, ``BusyResourceError`` for a second
concurrent ``receive`` or ``send``.

The control channel's Unix sockets use the same stream (:func:`connect_unix`,
:func:`accept_unix`); there :attr:`TcpStream.reusable` tells a client whether a
connection is fit for its next call.

Only for the asyncio backend (the node runs on asyncio or uvloop); the
``connect_*`` and ``accept_*`` functions fall back to anyio's own streams on
any other backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

import anyio
import anyio.abc

__all__ = ["READ_HIGH", "READ_LOW", "TcpStream", "accept_tcp", "accept_unix", "connect_tcp", "connect_unix"]

READ_HIGH = 256 * 1024
"""Unread bytes at which the stream stops reading from the socket."""
READ_LOW = 64 * 1024
"""Unread bytes below which a paused stream reads again."""


class _Signal:
    """Where one task waits for a protocol callback (data, room to write, the end)."""

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.reading_paused = False
        self.write_paused = False
        self.readable = _Signal()
        self.writable = _Signal()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport.set_write_buffer_limits(0)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(bytes(data))
        self.buffered += len(data)
        if self.buffered >= READ_HIGH and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self.readable.wake()

    def eof_received(self) -> bool:
        self.eof = True
        self.readable.wake()
        return True  # keep our side open for writing (a half-close, as with anyio)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self.readable.wake()
        self.writable.wake()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self.writable.wake()


class TcpStream(anyio.abc.ByteStream):
    """One TCP connection; build it with :func:`connect_tcp` or :func:`accept_tcp`."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closed = False
        self._receiving = False
        self._sending = False

    def _unreadable(self) -> BaseException | None:
        """Why nothing more can be read right now, or ``None`` if it is worth waiting."""
        p = self._protocol
        if self._closed:
            return anyio.ClosedResourceError()
        if p.lost and p.error is not None:
            return anyio.BrokenResourceError(str(p.error))
        if p.eof or p.lost:
            return anyio.EndOfStream()
        return None

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if max_bytes < 1:
            raise ValueError("max_bytes must be a positive integer")
        if self._receiving:
            raise anyio.BusyResourceError("reading from")
        p = self._protocol
        if not p.chunks:
            reason = self._unreadable()
            if reason is not None:
                raise reason
            self._receiving = True
            try:
                await p.readable.wait()
            finally:
                self._receiving = False
            if not p.chunks:
                reason = self._unreadable()
                raise reason if reason is not None else anyio.BrokenResourceError("woken without data")
        chunk = p.chunks.popleft()
        if len(chunk) > max_bytes:
            p.chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        p.buffered -= len(chunk)
        if p.reading_paused and p.buffered <= READ_LOW and not p.lost and not self._closed:
            p.reading_paused = False
            self._transport.resume_reading()
        return chunk

    async def send(self, item: bytes) -> None:
        await self.drain()  # room first; no await between it and the write, so no other send interleaves
        try:
            self._transport.write(item)
        except RuntimeError as exc:
            if self._transport.is_closing():
                raise anyio.BrokenResourceError(str(exc)) from exc
            raise
        if self._protocol.write_paused or self._transport.is_closing():
            await self.drain()  # raises if the write failed and the connection is going

    def try_write(self, item: bytes) -> bool:
        """Hand ``item`` to the transport now if nothing is in the way; never waits.

        ``False`` (nothing written) while a ``send`` is in progress, the
        kernel's buffer is full, or the stream is closed or broken: then use
        ``send``.  ``True``: written, but the kernel may have taken only part
        of it; until :meth:`drain` returns, the rest waits in the transport
        (and an ``aclose`` would drop it), as :attr:`write_pending` says.  A
        caller that has no other await saves a trip through the event loop.
        """
        p = self._protocol
        if self._sending or self._closed or p.lost or p.write_paused or self._transport.is_closing():
            return False
        self._transport.write(item)
        return True

    @property
    def write_pending(self) -> bool:
        """Bytes given to :meth:`try_write` still wait for room in the kernel's buffer."""
        return self._protocol.write_paused

    @property
    def reusable(self) -> bool:
        """Open both ways with nothing unread and nothing unsent: a new exchange may start here.

        ``False`` once the peer closed (even cleanly) or sent something unasked.
        """
        p = self._protocol
        return not (
            self._closed
            or p.eof
            or p.lost
            or p.chunks
            or p.write_paused
            or self._receiving
            or self._sending
            or self._transport.is_closing()
        )

    @property
    def unsent_bytes(self) -> int:
        """Bytes written that still wait for room in the kernel's buffer (shrinks as the peer reads)."""
        return int(self._transport.get_write_buffer_size())

    async def drain(self) -> None:
        """Wait until the kernel has every byte written so far (errors as :meth:`send`).

        One task at a time waits here (``BusyResourceError`` for another), so
        ``send`` and ``drain`` of two tasks never mix their bytes.
        """
        if self._sending:
            raise anyio.BusyResourceError("writing to")
        self._sending = True
        try:
            await self._wait_writable()
        finally:
            self._sending = False

    async def _wait_writable(self) -> None:
        p = self._protocol
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            if p.lost or self._transport.is_closing():  # closing: a write failed, or the peer is gone
                raise anyio.BrokenResourceError(str(p.error or "connection lost"))
            if not p.write_paused:
                return
            await p.writable.wait()

    async def send_eof(self) -> None:
        try:
            self._transport.write_eof()
        except (OSError, RuntimeError):  # uvloop raises RuntimeError on a closed handle
            pass

    async def aclose(self) -> None:
        self._closed = True
        self._transport.abort()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return {}

        def address(addr: Any) -> Any:
            return addr[:2] if isinstance(addr, tuple) and sock.family == socket.AF_INET6 else addr

        return {
            anyio.abc.SocketAttribute.family: lambda: sock.family,
            anyio.abc.SocketAttribute.raw_socket: lambda: sock,
            anyio.abc.SocketAttribute.local_address: lambda: address(sock.getsockname()),
            anyio.abc.SocketAttribute.remote_address: lambda: address(sock.getpeername()),
            anyio.abc.SocketAttribute.local_port: lambda: sock.getsockname()[1],
            anyio.abc.SocketAttribute.remote_port: lambda: sock.getpeername()[1],
        }


def _unwatch(loop: asyncio.AbstractEventLoop, raw: socket.socket) -> None:
    """Stop watching ``raw`` for readability (a closed socket, or none watched: nothing to do)."""
    with contextlib.suppress(ValueError, NotImplementedError, OSError):
        loop.remove_reader(raw)


def _accepted(loop: asyncio.AbstractEventLoop, raw: socket.socket) -> asyncio.Future[socket.socket]:
    """The next connection on the non-blocking listening socket ``raw``: taken now if one waits,
    else when the socket is readable.  Nothing is taken once the future is done (cancelled)."""
    fut: asyncio.Future[socket.socket] = loop.create_future()

    def take() -> bool:
        """Whether the future is settled (a connection or an error); False: try again later."""
        if fut.done():
            return True
        try:
            conn, _ = raw.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except Exception as exc:  # EMFILE, a closed socket: the accept loop decides
            fut.set_exception(exc)
            return True
        fut.set_result(conn)
        return True

    def readable() -> None:
        if take():
            _unwatch(loop, raw)

    if not take():
        loop.add_reader(raw, readable)
    return fut


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _nodelay(sock: Any) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass  # not a TCP socket (or a transport that does not expose it)


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def connect_tcp(host: str, port: int) -> anyio.abc.ByteStream:
    """Connect to ``host:port`` (raises ``OSError`` on failure).

    An IP address (what peers advertise) gets a :class:`TcpStream`; a host
    name goes through anyio, whose "happy eyeballs" race the name's addresses
    (an unreachable IPv6 address does not use up the whole connect timeout).
    """
    if not _on_asyncio() or not _is_ip_literal(host):
        return await anyio.connect_tcp(host, port)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(_Protocol, host, port)
    _nodelay(transport.get_extra_info("socket"))
    return TcpStream(transport, protocol)


async def connect_unix(path: str | os.PathLike[str]) -> anyio.abc.ByteStream:
    """Connect to the Unix socket at ``path`` (raises ``OSError`` on failure)."""
    if not _on_asyncio():
        return await anyio.connect_unix(path)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_unix_connection(_Protocol, os.fspath(path))
    return TcpStream(transport, protocol)


async def accept_tcp(listener: anyio.abc.SocketListener) -> anyio.abc.ByteStream:
    """Accept the next connection on an anyio TCP ``listener`` (raises ``OSError`` on failure)."""
    return await _accept(listener, tcp=True)


async def accept_unix(listener: anyio.abc.SocketListener) -> anyio.abc.ByteStream:
    """Accept the next connection on an anyio Unix ``listener`` (raises ``OSError`` on failure)."""
    return await _accept(listener, tcp=False)


async def _accept(listener: anyio.abc.SocketListener, *, tcp: bool) -> anyio.abc.ByteStream:
    if not _on_asyncio():
        return await listener.accept()
    raw = listener.extra(anyio.abc.SocketAttribute.raw_socket)
    if raw.fileno() == -1:
        raise anyio.ClosedResourceError  # as anyio's own accept says, so accept loops end
    loop = asyncio.get_running_loop()
    accepted = _accepted(loop, raw)
    try:
        sock = await accepted
    except asyncio.CancelledError:
        _unwatch(loop, raw)  # no stale watcher on the socket (bpo-41317)
        # a cancel that lands after the connection was taken (its result waiting for this task
        # to wake) closes that socket instead of dropping it
        if accepted.done() and not accepted.cancelled() and accepted.exception() is None:
            accepted.result().close()
        raise
    try:
        sock.setblocking(False)
        if tcp:
            _nodelay(sock)
        transport, protocol = await loop.connect_accepted_socket(_Protocol, sock)
    except BaseException:
        sock.close()
        raise
    return TcpStream(transport, protocol)
