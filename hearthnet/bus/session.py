"""Many concurrent calls multiplexed over one authenticated link.

Messages (all maps with a ``t`` type field)::

    req     {id, capability, version, params, input, deadline_ms, trace_id, stream}
    in      {id, data}            caller -> handler input frame (streams only)
    in_end  {id}                  caller has no more input
    cancel  {id}                  caller gave up (deadline, caller gone)
    frame   {id, data}            handler -> caller stream frame
    done    {id, output, meta}    exactly one of done / error ends a call
    error   {id, error, message, retry_after_ms?}
    credit_in  {id, n}            handler grants the caller n more input frames
    credit_out {id, n}            caller grants the handler n more stream frames
    keepalive  {}                 sent when we have sent nothing for a while; ignored
    anything else                 a control message handed to ``on_control``

Request ids are chosen by the caller; the direction of each message type tells
whose id it is.  Liveness: a side that has written nothing for
``keepalive_seconds`` sends a ``keepalive``, and a link on which nothing has
arrived for ``dead_after_seconds`` is closed as dead (a peer that lost power
or sits behind a cut network never sends the FIN or RST that would tell us).
Stream frames in both directions use credit-based flow
control (``WINDOW`` frames in flight), so a slow consumer slows its producer
instead of filling memory; a peer that sends beyond its credit breaks the
protocol and the link is closed.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hearthnet.bus.context import CallResult
from hearthnet.bus.deadlines import DeadlineTimer
from hearthnet.bus.flow import Credit, OneShot, Wakeup, credit_amount, deliver_within_credit
from hearthnet.bus.liveness import Liveness, watch_link
from hearthnet.errors import (
    BusError,
    CapacityExceeded,
    InternalError,
    Partition,
    ProtocolError,
    Timeout,
    error_from_wire,
)
from hearthnet.transport.link import Link
from hearthnet.wire.codec import wire_shape_problem

log = structlog.get_logger("hearthnet.bus.session")

WINDOW = 16
MAX_INCOMING_PER_PEER = 256
_MAX_DEADLINE_MS = 3_600_000


@dataclass(slots=True, repr=False, eq=False)
class Request:
    """A decoded ``req`` message."""

    id: int
    capability: str
    version: str
    params: dict[str, Any]
    input: dict[str, Any]
    deadline_ms: int
    trace_id: str
    stream: bool

    def __repr__(self) -> str:
        return f"Request(id={self.id}, capability={self.capability!r}, version={self.version!r})"

    @classmethod
    def parse(cls, msg: dict[str, Any]) -> Request:
        """Check a peer's ``req`` map field by field (``ProtocolError`` names what is wrong)."""
        get = msg.get
        rid = get("id")
        capability = get("capability")
        if rid is None or capability is None:
            raise ProtocolError(f"request lacks field {'id' if rid is None else 'capability'!r}")
        if type(rid) is not int:  # msgpack gives exact ints; a bool is not an id
            raise ProtocolError("request id must be an integer")
        params = get("params") or {}
        inp = get("input") or {}
        if type(params) is not dict or type(inp) is not dict:
            raise ProtocolError("params and input must be maps")
        deadline = get("deadline_ms", 10_000)
        kind = type(deadline)
        if kind is not int and (kind is not float or not math.isfinite(deadline)):
            raise ProtocolError("deadline_ms must be a number")
        version = get("version", "1.0")
        trace_id = get("trace_id", "")
        if type(capability) is not str or type(version) is not str or type(trace_id) is not str:
            raise ProtocolError("capability, version and trace_id must be strings")
        return cls(
            rid,
            capability,
            version,
            params,
            inp,
            int(min(max(deadline, 0), _MAX_DEADLINE_MS)),
            trace_id[:64],
            bool(get("stream", False)),
        )


class OutgoingCall:
    """Our side of a call we made to the peer."""

    __slots__ = (
        "__weakref__",
        "capability",
        "consumed",
        "frames_rx",
        "frames_tx",
        "gave_up",
        "id",
        "input_credit",
        "result",
        "session",
        "stream",
        "timer_seq",
    )

    def __init__(self, id: int, session: PeerSession, stream: bool, capability: str = "") -> None:
        self.id = id
        self.session = session
        self.stream = stream
        self.capability = capability
        self.result: OneShot[CallResult] = OneShot()
        self.input_credit: Credit | None = None
        """Input frames the handler lets us send (streamed calls only)."""
        self.frames_tx: MemoryObjectSendStream[dict[str, Any]] | None = None
        self.frames_rx: MemoryObjectReceiveStream[dict[str, Any]] | None = None
        self.consumed = 0
        self.gave_up = False
        """The peer said nothing of this call by its give-up time (the session's timer ended it)."""
        self.timer_seq = -1
        if stream:
            self.input_credit = Credit(WINDOW)
            self.frames_tx, self.frames_rx = anyio.create_memory_object_stream[dict[str, Any]](WINDOW)

    def __repr__(self) -> str:
        return f"OutgoingCall(id={self.id}, capability={self.capability!r}, done={self.result.done})"

    def finish(self, value: CallResult | BaseException) -> None:
        """End the call with its answer or an error; the session forgets it (later answers are dropped)."""
        self.session.outgoing.pop(self.id, None)
        if isinstance(value, BaseException):
            self.result.fail(value)
        else:
            self.result.set(value)
        if self.frames_tx is not None:
            self.frames_tx.close()
        if self.input_credit is not None:
            self.input_credit.grant(1 << 30)  # wake any sender; it will see the call is over

    def release(self) -> None:
        """The caller is done with the call's frames: close the receiving end too (an unclosed
        memory stream warns when it is collected)."""
        if self.frames_tx is not None:
            self.frames_tx.close()
        if self.frames_rx is not None:
            self.frames_rx.close()

    async def send_input(self, data: dict[str, Any]) -> None:
        """Send one input frame once the handler grants credit; if the call has ended
        (answered early, failed, timed out), raise its error or do nothing."""
        assert self.input_credit is not None, "input frames go with streamed calls"
        await self.input_credit.acquire()
        if self.result.done:
            if self.result.error is not None:
                raise self.result.error
            return
        await self.session.send({"t": "in", "id": self.id, "data": data})

    async def end_input(self) -> None:
        if not self.result.done:
            await self.session.send({"t": "in_end", "id": self.id})

    async def next_frame(self) -> dict[str, Any] | None:
        """The next stream frame, or ``None`` once the call has ended."""
        assert self.frames_rx is not None
        try:
            frame = await self.frames_rx.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return None
        self.consumed += 1
        if self.consumed % (WINDOW // 2) == 0 and not self.result.done:
            await self.session.send_quiet({"t": "credit_out", "id": self.id, "n": WINDOW // 2})
        return frame

    async def cancel(self) -> None:
        """End the call here at once and tell the peer in the session's own task: a caller that
        gives up (e.g. overtaken by a hedge) never waits on a link to a peer that stopped reading."""
        if not self.result.done:
            self.finish(Partition("call cancelled"))
            self.session.spawn(self.session.send_quiet, {"t": "cancel", "id": self.id})


class IncomingCall:
    """The peer's call being served here.

    Stream state (input queue, output credit) exists only for streamed calls:
    a plain call costs no more than its request and its answer.
    """

    __slots__ = (
        "cancelled",
        "consumed",
        "deadline_passed",
        "input_rx",
        "input_tx",
        "output_credit",
        "ref",
        "request",
        "running",
        "scope",
        "session",
        "timer_seq",
    )

    def __init__(self, request: Request, session: PeerSession) -> None:
        self.request = request
        self.session = session
        self.scope: anyio.CancelScope | None = None
        """The scope the handler runs in: its worker's (set by the worker), or one the dispatcher
        gives :meth:`enforce_deadline`.  While :attr:`running`, a ``cancel`` or the deadline
        cancels it."""
        self.running = False
        """The handler is running in :attr:`scope` (only then may the scope be cancelled for it)."""
        self.ref = request.capability
        """What the dispatcher calls the capability (``name@X.Y``), for the answer to a cut call."""
        self.cancelled = False
        """The caller sent ``cancel``."""
        self.deadline_passed = False
        """The call's deadline came before its answer (the session's timer cancelled the scope)."""
        self.output_credit: Credit | None = None
        self.input_tx: MemoryObjectSendStream[dict[str, Any] | None] | None = None
        self.input_rx: MemoryObjectReceiveStream[dict[str, Any] | None] | None = None
        self.consumed = 0
        self.timer_seq = -1
        if request.stream:
            self.output_credit = Credit(WINDOW)
            # WINDOW input frames plus the end marker
            self.input_tx, self.input_rx = anyio.create_memory_object_stream[dict[str, Any] | None](
                WINDOW + 1
            )

    def __repr__(self) -> str:
        return f"IncomingCall({self.request!r}, cancelled={self.cancelled})"

    def release(self) -> None:
        """The call is over here: close its input queue, both ends."""
        if self.input_tx is not None:
            self.input_tx.close()
        if self.input_rx is not None:
            self.input_rx.close()

    def cancel(self) -> None:
        self.cancelled = True
        if self.running:
            assert self.scope is not None
            self.scope.cancel()

    def enforce_deadline(self, scope: anyio.CancelScope, deadline: float) -> None:
        """Run the handler in ``scope``: a ``cancel`` from the caller or ``deadline``
        (``anyio.current_time()`` scale) cancels it; one timer per session keeps the time."""
        self.scope = scope
        self.start(deadline)

    def start(self, deadline: float) -> None:
        """The handler starts now in :attr:`scope` (its worker's, unless :meth:`enforce_deadline`
        gave another); a ``cancel`` or ``deadline`` cancels that scope until :meth:`stop`.

        A worker's scope serves call after call and is left, and a new one made, only when
        it was cancelled: a call costs no cancel scope of its own.  A handler cut short in
        the worker's scope raises the backend's cancellation out of the dispatcher; the
        worker catches it at the scope and runs the session's ``on_cut`` for the call.
        """
        self.running = True
        if self.cancelled:
            assert self.scope is not None
            self.scope.cancel()
        self.session.deadlines.add(deadline, self, self.request.id, False)

    def stop(self) -> None:
        """The handler has ended: nothing may cancel the worker's scope for this call any more."""
        self.running = False

    async def send_frame(self, data: dict[str, Any]) -> None:
        if self.output_credit is None:
            return  # the caller did not ask for frames
        problem = wire_shape_problem(data) if isinstance(data, dict) else ("key", "a frame is not a map")
        if problem is not None:  # the caller would have to close the link: fail this call only
            raise InternalError(f"a stream frame cannot cross the wire: {problem[1]}")
        await self.output_credit.acquire()
        await self.session.send({"t": "frame", "id": self.request.id, "data": data})

    async def receive_input(self) -> dict[str, Any] | None:
        if self.input_rx is None:
            return None  # a plain call has no input frames
        try:
            item = await self.input_rx.receive()
        except anyio.EndOfStream:
            return None
        if item is not None:
            self.consumed += 1
            if self.consumed % (WINDOW // 2) == 0:
                await self.session.send_quiet({"t": "credit_in", "id": self.request.id, "n": WINDOW // 2})
        return item


Dispatcher = Callable[["PeerSession", IncomingCall], Awaitable[None]]
"""Serves one call from the peer (answering it); ``on_cut`` answers one whose handler was cut short."""
ControlHandler = Callable[["PeerSession", dict[str, Any]], Awaitable[None]]


class PeerSession:
    """Runs the reader loop of one link and routes every message to its call."""

    def __init__(
        self,
        link: Link,
        *,
        dispatcher: Dispatcher,
        on_control: ControlHandler,
        liveness: Liveness | None = None,
        on_cut: Dispatcher | None = None,
    ) -> None:
        self.link = link
        self.liveness = liveness or Liveness()
        self.peer_id = link.peer_id
        self._dispatcher = dispatcher
        self._on_cut = on_cut
        self._on_control = on_control
        self._ids = itertools.count(1)
        self.outgoing: dict[int, OutgoingCall] = {}
        self.incoming: dict[int, IncomingCall] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        # Calls from the peer are served by pooled worker tasks: handing a call to a
        # waiting worker costs a fraction of spawning a task for it.  Calls wait in
        # `_work`; an idle worker parks on a wakeup in `_parked`.  Every queued call
        # has a worker that will look at the queue: a parked one woken for it, a new
        # one, or one that finishes a call and takes the next before parking.
        self._work: deque[IncomingCall] = deque()
        self._parked: list[Wakeup] = []
        self.workers = 0
        self.deadlines: DeadlineTimer[OutgoingCall | IncomingCall] = DeadlineTimer(
            self.outgoing, self.incoming, self._deadline_passed
        )
        """Gives up on our calls and stops the peer's at their times (one timer task)."""
        self.new_scope: Callable[[], anyio.CancelScope] = anyio.CancelScope
        """Makes a cancel scope; once the session runs, the backend's own class (no look-up)."""
        self.closed = anyio.Event()
        self.close_reason: str = ""
        self.manifest_seen = False
        self.refused_calls = 0
        self.protocol_error = False

    # sending -----------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        """Send or raise ``Partition`` if the link is gone."""
        try:
            # Several calls in flight: let their frames share one write.
            await self.link.send(message, linger=len(self.incoming) + len(self.outgoing) > 1)
        except BusError:
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            raise Partition(f"link to {self.peer_id} is closed") from exc

    async def send_quiet(self, message: dict[str, Any]) -> None:
        """Best-effort send for bookkeeping messages."""
        try:
            await self.send(message)
        except BusError:
            pass

    async def request(
        self,
        capability: str,
        version: str,
        params: dict[str, Any],
        input: dict[str, Any],
        *,
        deadline_ms: int,
        trace_id: str,
        stream: bool,
        give_up_at: float | None = None,
    ) -> OutgoingCall:
        """Send a request; with ``give_up_at`` (``anyio.current_time()`` scale) the call fails
        with ``timeout`` at that time unless answered, and the peer is told to cancel it."""
        if self.closed.is_set():
            raise Partition(f"link to {self.peer_id} is closed")
        call = OutgoingCall(next(self._ids), self, stream, capability)
        self.outgoing[call.id] = call
        if give_up_at is not None:
            self.deadlines.add(give_up_at, call, call.id, True)
        try:
            await self.send(
                {
                    "t": "req",
                    "id": call.id,
                    "capability": capability,
                    "version": version,
                    "params": params,
                    "input": input,
                    "deadline_ms": deadline_ms,
                    "trace_id": trace_id,
                    "stream": stream,
                }
            )
        except BaseException:
            self.outgoing.pop(call.id, None)
            call.release()
            raise
        return call

    # reading -----------------------------------------------------------------
    async def run(self) -> None:
        """Read until the link closes; then fail every pending call with ``partition``."""
        self.new_scope = type(anyio.CancelScope())  # what anyio.CancelScope() would dispatch to
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._watch_liveness, tg.cancel_scope)
                tg.start_soon(self.deadlines.run)
                try:
                    while True:
                        pending = self._route(await self.link.receive())
                        if pending is not None:
                            await pending
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    self.close_reason = self.close_reason or "closed"
                except ProtocolError as exc:
                    self.protocol_error = True
                    self.close_reason = f"protocol error: {exc.message}"
                    log.warning("link_protocol_error", peer=self.peer_id, reason=exc.message)
                except BusError as exc:
                    self.close_reason = f"{exc.code}: {exc.message}"
                finally:
                    tg.cancel_scope.cancel()
                    # Close before waiting for our tasks: a write stuck on a peer that
                    # stopped reading cannot be cancelled, only failed by the close.
                    await self.link.aclose()
        finally:
            self.closed.set()
            for call in list(self.outgoing.values()):
                call.finish(Partition(f"link to {self.peer_id} was lost"))  # each leaves `outgoing`
            for inc in self.incoming.values():
                inc.release()
            self.incoming.clear()
            with anyio.CancelScope(shield=True):
                await self.link.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.link.aclose()

    async def _watch_liveness(self, reader: anyio.CancelScope) -> None:
        """Send a keepalive when we have been quiet; end the session when the peer has been silent."""
        self.close_reason = await watch_link(
            self.link, self.liveness, lambda: self.spawn(self.send_quiet, {"t": "keepalive"})
        )
        reader.cancel()

    def _deadline_passed(self, call: OutgoingCall | IncomingCall) -> None:
        """Fail our unanswered call with ``timeout`` (and tell the peer), or cut the peer's call."""
        if isinstance(call, OutgoingCall):
            call.gave_up = True
            call.finish(Timeout(f"{call.capability} on {self.peer_id} did not answer within the deadline"))
            self.spawn(self.send_quiet, {"t": "cancel", "id": call.id})
        elif call.running:
            assert call.scope is not None
            call.deadline_passed = True
            call.scope.cancel()

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        """Run ``fn`` as a task that ends with this session (never inside the reader itself)."""
        if self._tg is not None and not self.closed.is_set():
            self._tg.start_soon(fn, *args)

    def _route(self, msg: dict[str, Any]) -> Awaitable[None] | None:
        """Deliver one message; what must still be awaited (a control handler, a refusal) is returned."""
        t = msg.get("t")
        rid = msg.get("id")
        if t == "req":
            return self._on_request(msg)
        if t == "done" or t == "error" or t == "frame" or t == "credit_in":
            call = self.outgoing.get(rid) if type(rid) is int else None
            if call is None:
                return None  # late answer to a call we already gave up on
            if t == "done":
                output, meta = msg.get("output"), msg.get("meta") or {}
                if type(output) is not dict or type(meta) is not dict:
                    raise ProtocolError("done needs map output and meta")
                call.finish(CallResult(output, meta, self.peer_id))
            elif t == "error":
                call.finish(error_from_wire(msg))
            elif t == "frame":
                data = msg.get("data")
                if not isinstance(data, dict) or call.frames_tx is None:
                    raise ProtocolError("unexpected stream frame")
                deliver_within_credit(call.frames_tx, data, "stream frames")
            elif call.input_credit is not None:
                call.input_credit.grant(credit_amount(msg))
            else:
                raise ProtocolError("input credit for a call that takes no input frames")
        elif t in ("in", "in_end", "cancel", "credit_out"):
            inc = self.incoming.get(rid) if isinstance(rid, int) else None
            if inc is None:
                return None
            if t == "in":
                data = msg.get("data")
                if not isinstance(data, dict) or inc.input_tx is None:
                    raise ProtocolError("input frame must be a map, on a streamed call")
                deliver_within_credit(inc.input_tx, data, "input frames")
            elif t == "in_end":
                if inc.input_tx is not None:
                    try:
                        inc.input_tx.send_nowait(None)
                    except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                        pass
            elif t == "cancel":
                inc.cancel()
            elif inc.output_credit is not None:
                inc.output_credit.grant(credit_amount(msg))
        elif t == "keepalive":
            return None  # its arrival already counted as a sign of life
        elif isinstance(t, str):
            return self._on_control(self, msg)
        else:
            raise ProtocolError("message without a type")
        return None

    def _on_request(self, msg: dict[str, Any]) -> Awaitable[None] | None:
        """Queue the peer's call for a worker, or return the refusal to send (too many in flight)."""
        req = Request.parse(msg)
        incoming = self.incoming
        if req.id in incoming:
            raise ProtocolError("request id reused while in flight")
        if len(incoming) >= MAX_INCOMING_PER_PEER:
            self.refused_calls += 1
            err = CapacityExceeded("too many calls in flight from this peer", retry_after_ms=50)
            # awaited by the reader: a peer that floods us is slowed down by its own refusals
            return self.send_quiet({"t": "error", "id": req.id, **err.to_wire()})
        inc = IncomingCall(req, self)
        incoming[req.id] = inc
        self._work.append(inc)
        if self._parked:
            self._parked.pop().set()  # that worker takes this call (or one queued before it)
        else:
            assert self._tg is not None
            self.workers += 1  # about one per call in flight at most (specs/bus.md: worker pool)
            self._tg.start_soon(self._worker)
        return None

    async def _worker(self) -> None:
        """Serve the peer's calls one after another until the session ends (it cancels us).

        Calls run in the worker's cancel scope (see :meth:`IncomingCall.start`); once it
        has been cancelled for a call, the worker leaves it, has that call answered by
        ``on_cut`` if it was cut short, and goes on in a new scope.
        """
        work, dispatch = self._work, self._dispatcher
        while True:
            inc: IncomingCall | None = None
            with self.new_scope() as scope:
                while not scope.cancel_called:
                    if not work:
                        wake = Wakeup()
                        self._parked.append(wake)
                        await wake.wait()
                        continue
                    inc = work.popleft()
                    inc.scope = scope
                    try:
                        await dispatch(self, inc)
                    finally:
                        inc.running = False
                        self.incoming.pop(inc.request.id, None)
                        inc.release()
            if scope.cancelled_caught and inc is not None and self._on_cut is not None:
                await self._on_cut(self, inc)  # its handler was cut short: no answer went out
