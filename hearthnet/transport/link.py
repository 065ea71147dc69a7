"""An authenticated, encrypted, framed link over any anyio byte stream.

Layers, bottom up: bytes -> frames (:class:`~hearthnet.wire.frames.FrameDecoder`,
size cap) -> AEAD (:class:`~hearthnet.transport.session.Session`) -> a batch of
length-prefixed messages (:func:`~hearthnet.wire.frames.split_batch`) -> one
msgpack map per message.  Messages queued together are sealed together, so a
burst of small messages costs one encryption per write, not one per message.
:func:`initiate_link` and :func:`accept_link` run the handshake of
:mod:`hearthnet.transport.handshake` over a stream; :func:`open_link` adds a
TCP connect.  Errors a caller sees:

* ``send``: ``ProtocolError`` if the message cannot be encoded or exceeds the
  frame cap (the link stays open); ``Partition`` if the link is closed or broke.
* ``receive``: ``anyio.EndOfStream`` when the peer closed cleanly;
  ``ProtocolError`` on any protocol violation (the link is closed first);
  ``Partition`` if the link is closed locally or the connection broke.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from hearthnet.errors import BusError, Partition, ProtocolError, Timeout
from hearthnet.identity.keys import Identity
from hearthnet.transport.addresses import format_address
from hearthnet.transport.handshake import (
    InitiatorHandshake,
    ResponderHandshake,
    raise_if_refusal,
    refusal_map,
)
from hearthnet.transport.session import TAG_LEN, Session
from hearthnet.transport.tcp_stream import connect_tcp
from hearthnet.wire.codec import Packer, pack, unpack_map
from hearthnet.wire.frames import (
    DEFAULT_MAX_FRAME,
    HEADER,
    HEADER_LEN,
    FrameDecoder,
    encode_batch,
    encode_frame,
    split_batch,
)

__all__ = [
    "BATCH_BYTES",
    "HANDSHAKE_MAX_FRAME",
    "RECEIVE_SIZE",
    "Admit",
    "Link",
    "accept_link",
    "format_address",
    "initiate_link",
    "open_link",
    "socket_peer_address",
]

Admit = Callable[[str], None]
"""``admit(peer_node_id)`` returns to accept the peer, raises ``Unauthorized``/``Revoked`` to refuse."""

RECEIVE_SIZE = 1 << 20
HANDSHAKE_MAX_FRAME = 16 * 1024
"""Largest frame buffered before the peer has proven its key (handshake messages are ~200 bytes)."""
LINGER_BATCH = 16
"""A lingering burst is written every this many messages (see :meth:`Link.send`)."""
BATCH_BYTES = 64 * 1024
"""Plaintext bytes of queued messages sealed into one frame, at most (a larger message goes
alone): enough to share one encryption among hundreds of small messages, small enough that
the peer need not wait for a long frame before it can start on its first message."""
_OK = {"ok": True}
_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


def _new_lock() -> anyio.Lock:
    try:
        return anyio.Lock(fast_acquire=True)  # anyio >= 4.5: no checkpoint when uncontended
    except TypeError:  # pragma: no cover - older anyio
        return anyio.Lock()


class Link:
    """One established connection to a proven peer; build it with :func:`open_link` or :func:`accept_link`."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        session: Session,
        *,
        peer_id: str,
        local_id: str,
        remote_address: str,
        initiator: bool,
        decoder: FrameDecoder,
        frames: deque[bytes],
        max_frame: int,
    ) -> None:
        self.peer_id = peer_id
        self.local_id = local_id
        self.remote_address = remote_address
        self.initiator = initiator
        self._stream = stream
        self._try_write: Callable[[bytes], bool] | None = getattr(stream, "try_write", None)
        self._session = session
        self._pack = Packer().pack
        self._decoder = decoder
        self._frames = frames  # received, still encrypted; opened lazily in order
        self._messages: deque[memoryview] = deque()  # opened, not yet decoded, in order
        self._max_message = max_frame - TAG_LEN - HEADER_LEN
        self._batch_limit = max(1, min(BATCH_BYTES, max_frame - TAG_LEN))
        # Queued messages in batches of plaintext pieces (length, message, length, ...),
        # each batch at most `_batch_limit` bytes unless one message alone is larger; a
        # writer seals them (counter order = write order) into `_out`.
        self._batches: list[list[bytes]] = []
        self._batch_size = 0  # bytes in the last batch
        self._out: list[bytes] = []  # sealed frames waiting for a writer, in counter order
        self._queued = 0
        self._flushed = 0
        self._send_lock = _new_lock()
        self._lingering = False  # a lingering sender will write what is queued at the end of this turn
        self._recv_lock = _new_lock()
        self._closed = False
        self._eof = False
        self.last_received = time.monotonic()
        """``time.monotonic()`` when bytes last arrived from the peer (liveness checks)."""
        self.last_sent = self.last_received
        """``time.monotonic()`` when our frames were last written to the stream."""
        self.write_blocked_since: float | None = None
        """``time.monotonic()`` when the write in progress began or last made progress
        (``None``: no write in progress); see :meth:`write_stalled_for`."""
        self._unsent_seen: int | None = None

    def __repr__(self) -> str:
        role = "initiator" if self.initiator else "responder"
        return f"Link({self.peer_id} at {self.remote_address}, {role}{', closed' if self._closed else ''})"

    @property
    def local_host(self) -> str | None:
        """This end's IP address (``None`` for a stream that is not a socket)."""
        try:
            address = self._stream.extra(anyio.abc.SocketAttribute.local_address)
        except (anyio.TypedAttributeLookupError, OSError):
            return None
        return str(address[0]) if isinstance(address, tuple) else None

    @property
    def closed(self) -> bool:
        return self._closed

    def write_stalled_for(self, now: float) -> float:
        """Seconds the write in progress has made no progress (0.0 if none is in progress).

        A write of many frames to a slow peer may rightly take longer than the
        liveness limit: on a stream that says how much it still has to send
        (``unsent_bytes``, :class:`~hearthnet.transport.tcp_stream.TcpStream`),
        every look that finds less unsent than the last one restarts the clock.
        Other streams measure the write from its start.
        """
        since = self.write_blocked_since
        if since is None:
            self._unsent_seen = None
            return 0.0
        unsent = getattr(self._stream, "unsent_bytes", None)
        if isinstance(unsent, int):
            if self._unsent_seen is not None and unsent < self._unsent_seen:
                self.write_blocked_since = since = now  # the peer is reading: not stalled
            self._unsent_seen = unsent
        return max(0.0, now - since)

    async def send(self, message: dict[str, Any], *, linger: bool = False) -> None:
        """Encode and queue one message, and see that it is written; safe from many tasks at once.

        Whoever writes seals everything queued (messages queued together share
        one sealed frame) and writes it in one write, without an await between
        sealing and writing, so counter order equals write order; this
        coalesces bursts from concurrent senders.  With ``linger`` (the
        caller expects other sends right behind this one, e.g. many calls in
        flight) the first such sender lets the other ready tasks run for one
        turn of the event loop and then writes what they queued; the others
        return as soon as their frame is queued.  So that the peer can start on
        a burst before it has all been produced, a lingering burst is written
        every ``LINGER_BATCH`` frames rather than only at the end of the turn.
        Once a frame is queued it will be written (or the link closes):
        waiting for the writer's lock and the write itself are not
        cancellable, since a sealed frame that is never written would break
        the counter order.  A write that makes no progress because the peer
        stopped reading is ended by closing the link (the session's liveness
        check does, see :attr:`write_blocked_since`).
        """
        payload = self._pack(message)
        size = len(payload)
        if size > self._max_message:
            raise ProtocolError(f"message of {size} bytes exceeds the link's maximum of {self._max_message}")
        if self._closed:
            raise Partition(f"link to {self.peer_id} is closed")
        size += HEADER_LEN
        if self._batches and self._batch_size + size <= self._batch_limit:
            batch = self._batches[-1]
            self._batch_size += size
        else:
            batch = []
            self._batches.append(batch)
            self._batch_size = size
        batch.append(HEADER.pack(size - HEADER_LEN))
        batch.append(payload)
        self._queued += 1
        if not linger:
            await self._flush(self._queued)
            return
        if self._queued - self._flushed < LINGER_BATCH:
            if self._lingering:
                return  # the lingering sender writes this frame at the end of the turn
            self._lingering = True
            try:
                await anyio.lowlevel.cancel_shielded_checkpoint()
            finally:
                self._lingering = False
        await self._flush(self._queued)

    def _seal_queued(self) -> bytes:
        """Seal every queued batch into a frame and return all frames not yet written."""
        out, seal, batches = self._out, self._session.seal, self._batches
        if not out and len(batches) == 1:  # the common case: one batch, nothing left over
            sealed = seal(b"".join(batches[0]))
            batches.clear()
            return HEADER.pack(len(sealed)) + sealed
        for batch in batches:
            sealed = seal(b"".join(batch))
            out.append(HEADER.pack(len(sealed)))
            out.append(sealed)
        batches.clear()
        data = b"".join(out)
        out.clear()
        return data

    async def _flush(self, ticket: int) -> None:
        """Write every queued message unless message number ``ticket`` has been written already."""
        if self._flushed >= ticket:
            return
        if self._try_write is not None and not self._closed and not self._send_lock.locked():
            # Nobody is writing and the kernel has room: write without waiting (tcp_stream.py).
            data = self._seal_queued()
            if self._try_write(data):
                self._flushed = self._queued
                self.last_sent = time.monotonic()
                if getattr(self._stream, "write_pending", False):
                    await self._drain()  # the kernel took part: the rest must not be lost on close
                return
            self._out.append(data)  # sealed: written next, by the writer below
        # The frames are sealed: once queued they must be written whole or the link
        # is corrupt, so neither the wait for the lock nor the write may be given up
        # halfway by the caller's cancellation.  A write stalled by a peer that
        # stopped reading is ended by closing the link, which fails it.
        with anyio.CancelScope(shield=True):
            async with self._send_lock:
                if self._flushed >= ticket:
                    return  # a concurrent sender wrote our frame with its own
                if self._closed:
                    raise Partition(f"link to {self.peer_id} is closed")
                data = self._seal_queued()
                upto = self._queued
                await self._watched(self._stream.send(data))
                self._flushed = upto
                self.last_sent = time.monotonic()

    async def _drain(self) -> None:
        """Wait, as a blocked write does, until the kernel has what ``try_write`` left buffered."""
        with anyio.CancelScope(shield=True):
            async with self._send_lock:  # later frames queue behind these bytes, in order
                await self._watched(self._stream.drain())  # type: ignore[attr-defined]

    async def _watched(self, write: Awaitable[None]) -> None:
        """Await a write that may wait for the peer (send lock held), timed for the liveness
        check (:meth:`write_stalled_for`); a broken stream closes the link (``Partition``)."""
        self.write_blocked_since = time.monotonic()
        try:
            await write
        except _STREAM_ERRORS as exc:
            await self._abort()
            raise Partition(f"link to {self.peer_id} broke while sending") from exc
        finally:
            self.write_blocked_since = None

    async def receive(self) -> dict[str, Any]:
        """The next message from the peer (see the module docstring for errors)."""
        messages, frames = self._messages, self._frames
        while True:
            # No await between taking a frame or message and decoding it keeps them in order.
            try:
                if messages:
                    return unpack_map(messages.popleft())
                if frames:
                    messages.extend(split_batch(self._session.open(frames.popleft())))
                    continue
            except ProtocolError:
                await self._abort()
                raise
            async with self._recv_lock:
                if messages or frames:
                    continue  # another receiver read meanwhile
                if self._closed:
                    raise Partition(f"link to {self.peer_id} is closed")
                if self._eof:
                    raise anyio.EndOfStream
                try:
                    data = await self._stream.receive(RECEIVE_SIZE)
                except anyio.EndOfStream:
                    if self._decoder.buffered:
                        await self._abort()
                        raise ProtocolError("peer closed the link in the middle of a frame") from None
                    self._eof = True
                    raise
                except _STREAM_ERRORS as exc:
                    await self._abort()
                    raise Partition(f"link to {self.peer_id} is closed") from exc
                self.last_received = time.monotonic()
                try:
                    frames.extend(self._decoder.feed(data))
                except ProtocolError:
                    await self._abort()
                    raise

    async def aclose(self) -> None:
        """Close the link; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._clear()
        await _close_stream(self._stream)

    async def _abort(self) -> None:
        if not self._closed:
            self._closed = True
            self._clear()
            await anyio.aclose_forcefully(self._stream)

    def _clear(self) -> None:
        self._frames.clear()
        self._messages.clear()
        self._batches.clear()
        self._out.clear()

    async def __aenter__(self) -> Link:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _close_stream(stream: anyio.abc.ByteStream) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await stream.aclose()
        except _STREAM_ERRORS:
            pass


async def _read_frame(stream: anyio.abc.ByteStream, decoder: FrameDecoder, frames: deque[bytes]) -> bytes:
    while not frames:
        try:
            data = await stream.receive(RECEIVE_SIZE)
        except anyio.EndOfStream:
            raise Partition("peer closed the connection during the handshake") from None
        except _STREAM_ERRORS as exc:
            raise Partition("connection lost during the handshake") from exc
        frames.extend(decoder.feed(data))
    return frames.popleft()


async def _write(stream: anyio.abc.ByteStream, payload: bytes) -> None:
    try:
        await stream.send(encode_frame(payload))
    except _STREAM_ERRORS as exc:
        raise Partition("connection lost during the handshake") from exc


async def _send_refusal(stream: anyio.abc.ByteStream, error: BusError) -> None:
    """Best effort: tell the peer why, in plaintext, before we close."""
    with anyio.move_on_after(1.0):
        try:
            await stream.send(encode_frame(pack(refusal_map(error))))
        except _STREAM_ERRORS:
            pass


async def initiate_link(
    stream: anyio.abc.ByteStream,
    *,
    identity: Identity,
    community_id: str,
    admit: Admit,
    remote_address: str,
    expected_peer: str | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
    handshake_timeout: float = 5.0,
) -> Link:
    """Run the initiator handshake on ``stream`` (any byte stream); close it on failure."""
    hs = InitiatorHandshake(identity, community_id, expected_peer=expected_peer)

    async def steps(read: _ReadFrame) -> tuple[str, Session]:
        await _write(stream, hs.hello)
        peer_id = hs.read_hello(await read())
        try:
            admit(peer_id)
        except BusError as exc:
            await _send_refusal(stream, exc)
            raise
        await _write(stream, hs.auth())
        keys = hs.session_keys()
        session = Session(keys.send_key, keys.recv_key)
        first = await read()
        try:
            welcome = split_batch(session.open(first))
        except ProtocolError:
            raise_if_refusal(unpack_map(first))  # a plaintext {error, message} refusal
            raise
        if len(welcome) != 1 or unpack_map(welcome[0]) != _OK:
            raise ProtocolError("responder's first encrypted message is not {ok: true}")
        return peer_id, session

    return await _handshake(
        stream,
        steps,
        initiator=True,
        local_id=identity.node_id,
        remote_address=remote_address,
        handshake_max_frame=max_frame,
        max_frame=max_frame,
        handshake_timeout=handshake_timeout,
    )


async def accept_link(
    stream: anyio.abc.ByteStream,
    *,
    identity: Identity,
    community_id: str,
    admit: Admit,
    remote_address: str,
    max_frame: int = DEFAULT_MAX_FRAME,
    handshake_timeout: float = 5.0,
) -> Link:
    """Run the responder handshake on an accepted ``stream``; close it on failure."""
    hs = ResponderHandshake(identity, community_id)

    async def steps(read: _ReadFrame) -> tuple[str, Session]:
        try:
            hs.read_hello(await read())
        except BusError as exc:
            if not isinstance(exc, Partition):
                await _send_refusal(stream, exc)
            raise
        await _write(stream, hs.hello())
        auth = await read()
        try:
            peer_id = hs.read_auth(auth)
            admit(peer_id)
        except BusError as exc:
            await _send_refusal(stream, exc)
            raise
        keys = hs.session_keys()
        session = Session(keys.send_key, keys.recv_key)
        await _write(stream, session.seal(encode_batch([pack(_OK)])))
        return peer_id, session

    # Until the peer has proven itself, it may not make us buffer more than a handshake needs.
    return await _handshake(
        stream,
        steps,
        initiator=False,
        local_id=identity.node_id,
        remote_address=remote_address,
        handshake_max_frame=min(max_frame, HANDSHAKE_MAX_FRAME),
        max_frame=max_frame,
        handshake_timeout=handshake_timeout,
    )


_ReadFrame = Callable[[], Awaitable[bytes]]


async def _handshake(
    stream: anyio.abc.ByteStream,
    steps: Callable[[_ReadFrame], Awaitable[tuple[str, Session]]],
    *,
    initiator: bool,
    local_id: str,
    remote_address: str,
    handshake_max_frame: int,
    max_frame: int,
    handshake_timeout: float,
) -> Link:
    """Run one side's handshake ``steps`` (frames read through the function they are given,
    at most ``handshake_max_frame`` bytes each) within ``handshake_timeout`` and return the
    link to the peer they name; on any failure close ``stream`` (a timeout as ``Timeout``)."""
    decoder = FrameDecoder(max_frame=handshake_max_frame)
    frames: deque[bytes] = deque()
    try:
        with anyio.fail_after(handshake_timeout):
            peer_id, session = await steps(lambda: _read_frame(stream, decoder, frames))
    except TimeoutError:
        await anyio.aclose_forcefully(stream)
        raise Timeout(f"handshake with {remote_address} took longer than {handshake_timeout} s") from None
    except BaseException:
        await anyio.aclose_forcefully(stream)
        raise
    decoder.set_max_frame(max_frame)
    return Link(
        stream,
        session,
        peer_id=peer_id,
        local_id=local_id,
        remote_address=remote_address,
        initiator=initiator,
        decoder=decoder,
        frames=frames,
        max_frame=max_frame,
    )


def socket_peer_address(stream: anyio.abc.ByteStream, *, default: str = "unknown") -> str:
    """The remote ``host:port`` of a socket stream, or ``default`` for other streams (or a socket
    whose peer already went away: ``getpeername`` then fails with ``ENOTCONN``)."""
    try:
        address = stream.extra(anyio.abc.SocketAttribute.remote_address)
    except (anyio.TypedAttributeLookupError, OSError):  # OSError: the peer already reset it
        return default
    if isinstance(address, tuple):
        return format_address(str(address[0]), int(address[1]))
    return str(address) or default


async def open_link(
    host: str,
    port: int,
    *,
    identity: Identity,
    community_id: str,
    admit: Admit,
    expected_peer: str | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
    handshake_timeout: float = 5.0,
) -> Link:
    """Connect over TCP and run the initiator handshake.

    ``Partition`` if the connection fails (or does not connect within
    ``handshake_timeout``), ``Timeout`` if the handshake is too slow, the
    peer's refusal (``Unauthorized``/``Revoked``) if it refuses us,
    ``Unauthorized`` if ``expected_peer`` is given and another key answers.
    """
    try:
        with anyio.fail_after(handshake_timeout):
            stream = await connect_tcp(host, port)
    except TimeoutError:
        raise Partition(
            f"could not connect to {format_address(host, port)} within {handshake_timeout} s"
        ) from None
    except OSError as exc:
        raise Partition(f"could not connect to {format_address(host, port)}: {exc.strerror or exc}") from exc
    return await initiate_link(  # connect_tcp sets TCP_NODELAY
        stream,
        identity=identity,
        community_id=community_id,
        admit=admit,
        remote_address=socket_peer_address(stream, default=format_address(host, port)),
        expected_peer=expected_peer,
        max_frame=max_frame,
        handshake_timeout=handshake_timeout,
    )
