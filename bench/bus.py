"""Bus latency and throughput between two node processes on loopback.

Ours: this process joins the community as a member (its own CapabilityBus over
an authenticated, encrypted TCP link) and calls ``node.ping`` on a separate
node process.  Floor, measured in the same run: a bare anyio TCP echo server
in another process, echoing the same msgpack request frame with no handshake,
encryption or bus.  Bound, same run (reported): our own authenticated,
encrypted link (``hearthnet.transport``) to a process that answers each request
message with a ``done`` message, no bus on either side -- what is left of the
latency target for the bus itself.  Two more bounds add only what any bus that
multiplexes concurrent calls on one link must do, still with no routing, trust,
admission, deadlines or accounting:

- *anyio*: the server runs each request in a task of an anyio task group (so a
  slow call never holds up the others), and the caller waits on an event that a
  reader task sets when the answer arrives;
- *least*: the server starts a bare asyncio task per request, and the caller
  reads the link itself (one call in flight needs no reader task) -- the
  cheapest multiplexing there is in Python; the 2x target leaves what remains
  of twice the floor for everything else the bus does, on both sides together.

    python -m bench.bus [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio

from bench.common import Metric, helper_servers, machine, median_range, node_like_process, percentile
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.testing import LocalMesh, member_bus
from hearthnet.wire.codec import pack
from hearthnet.wire.frames import FrameDecoder, encode_frame

ECHO_SERVER = r"""
import anyio, sys
from hearthnet.wire.frames import FrameDecoder, encode_frame
async def handle(stream):
    dec = FrameDecoder()
    async with stream:
        try:
            while True:
                data = await stream.receive(65536)
                out = b"".join(encode_frame(f) for f in dec.feed(data))
                if out:
                    await stream.send(out)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
async def main():
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    print(port, flush=True)
    await listener.serve(handle)
anyio.run(main, backend_options={'use_uvloop': True})
"""

LINK_SERVER = r"""
import asyncio, sys
import anyio
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.errors import BusError
from hearthnet.identity import Identity
from hearthnet.transport import create_listener, listener_port, serve_links
MODE = sys.argv[1]  # inline | anyio | least: how each request is answered
async def answer(link):
    async def one(msg):
        try:
            await link.send({"t": "done", "id": msg["id"], "output": {"pong": True}, "meta": {}})
        except BusError:
            pass  # the bench closed this link
    running = set()
    async with anyio.create_task_group() as tg:
        while True:
            try:
                msg = await link.receive()
            except (anyio.EndOfStream, BusError):
                break  # the bench closed this link; serve the next
            if MODE == "inline":
                await one(msg)
            elif MODE == "anyio":
                tg.start_soon(one, msg)
            else:
                task = asyncio.get_running_loop().create_task(one(msg))
                running.add(task)
                task.add_done_callback(running.discard)
async def main():
    listener = await create_listener("127.0.0.1", 0)
    print(listener_port(listener), flush=True)
    me = Identity.generate()
    await serve_links(listener, answer, identity=me, community_id="bench", admit=lambda _: None)
anyio.run(main, backend_options=event_loop_options())
"""
LINK_MODES = ("inline", "anyio", "least")

REQUEST = {
    "t": "req",
    "id": 1,
    "capability": "node.ping",
    "version": "1.0",
    "params": {},
    "input": {},
    "deadline_ms": 5000,
    "trace_id": "0123456789abcdef",
    "stream": False,
}


async def floor_latency(port: int, n: int) -> list[float]:
    frame = encode_frame(pack(REQUEST))
    dec = FrameDecoder()
    out: list[float] = []
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        for _ in range(n):
            t = time.perf_counter()
            await s.send(frame)
            got: list[bytes] = []
            while not got:
                got = dec.feed(await s.receive(65536))
            out.append((time.perf_counter() - t) * 1000)
    return out


async def link_latency(port: int, n: int, rounds: int, *, reader_task: bool = False) -> list[float]:
    """p50 (ms) per round of one request at a time over our encrypted link, no bus.

    With ``reader_task`` the caller waits on an event set by a task that reads
    the link (how a caller with several calls in flight gets its answer);
    otherwise it reads the link itself.
    """
    from hearthnet.identity import Identity
    from hearthnet.transport import open_link

    link = await open_link(
        "127.0.0.1", port, identity=Identity.generate(), community_id="bench", admit=lambda _: None
    )
    waiting: dict[int, anyio.Event] = {}

    async def reader() -> None:
        while True:
            msg = await link.receive()
            event = waiting.pop(msg["id"], None)
            if event is not None:
                event.set()

    async def call(i: int) -> None:
        if not reader_task:
            await link.send({**REQUEST, "id": i})
            await link.receive()
            return
        event = waiting[i] = anyio.Event()
        await link.send({**REQUEST, "id": i})
        await event.wait()

    p50s: list[float] = []
    try:
        async with anyio.create_task_group() as tg:
            if reader_task:
                tg.start_soon(reader)
            for i in range(100):
                await call(i)
            for _ in range(rounds):
                out: list[float] = []
                for i in range(n):
                    t = time.perf_counter()
                    await call(i)
                    out.append((time.perf_counter() - t) * 1000)
                p50s.append(percentile(out, 0.5))
            tg.cancel_scope.cancel()
    finally:
        await link.aclose()
    return p50s


async def floor_throughput(port: int, n: int, window: int = 32) -> float:
    frame = encode_frame(pack(REQUEST))
    dec = FrameDecoder()
    credit = anyio.Semaphore(window)
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        t = time.perf_counter()

        async def reader() -> None:
            seen = 0
            while seen < n:
                for _ in dec.feed(await s.receive(65536)):
                    seen += 1
                    credit.release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            for _ in range(n):
                await credit.acquire()
                await s.send(frame)
        return n / (time.perf_counter() - t)


async def ours(mesh: LocalMesh, n_latency: int, n_throughput: int, rounds: int) -> dict[str, list[float]]:
    server = mesh.nodes["a"]
    results: dict[str, list[float]] = {"p50": [], "p99": [], "cps": []}
    async with member_bus(server, mesh.nodes["bench"].home) as bus:
        for _ in range(100):  # warm-up
            await bus.call("node.ping", provider=server.node_id)
        for _ in range(rounds):
            lat = []
            for _ in range(n_latency):
                t = time.perf_counter()
                await bus.call("node.ping", provider=server.node_id)
                lat.append((time.perf_counter() - t) * 1000)
            results["p50"].append(percentile(lat, 0.5))
            results["p99"].append(percentile(lat, 0.99))
            done = 0
            t = time.perf_counter()

            async def worker() -> None:
                nonlocal done
                while done < n_throughput:
                    done += 1
                    await bus.call("node.ping", provider=server.node_id)

            async with anyio.create_task_group() as workers:
                for _ in range(32):
                    workers.start_soon(worker)
            results["cps"].append(n_throughput / (time.perf_counter() - t))
    return results


async def floors(port: int, n_latency: int, n_throughput: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"p50": [], "p99": [], "cps": []}
    await floor_latency(port, 100)
    for _ in range(rounds):
        lat = await floor_latency(port, n_latency)
        results["p50"].append(percentile(lat, 0.5))
        results["p99"].append(percentile(lat, 0.99))
        results["cps"].append(await floor_throughput(port, n_throughput))
    return results


def bound_metric(name: str, p50s: list[float], fp50: float, note: str) -> Metric:
    """A reported bound: its p50 over the rounds beside the echo floor's."""
    mid, lo, hi = median_range(p50s)
    return Metric(
        "node",
        name,
        "ms",
        round(mid, 4),
        round(fp50, 4),
        round(mid / fp50, 2),
        "(reported)",
        None,
        round(lo, 4),
        round(hi, 4),
        note=note,
    )


def run(quick: bool = False) -> list[Metric]:
    node_like_process()
    n_latency, n_throughput, rounds = (500, 2000, 3) if quick else (2000, 10000, 5)
    bound_p50: dict[str, list[float]] = {mode: [] for mode in LINK_MODES}
    with tempfile.TemporaryDirectory() as tmp, helper_servers() as start, LocalMesh(Path(tmp)) as mesh:
        port = start(ECHO_SERVER)
        link_ports = {mode: start(LINK_SERVER, mode) for mode in LINK_MODES}
        mesh.env.update({"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "HEARTHNET_LOG_LEVEL": "warning"})
        a = mesh.add("a")
        bench_node = mesh.add("bench")
        mesh.found(a)
        mesh.invite(a, bench_node, "member", start=False)
        # Interleave ours, the floor and the bounds so all see the same machine load.
        o: dict[str, list[float]] = {"p50": [], "p99": [], "cps": []}
        f: dict[str, list[float]] = {"p50": [], "p99": [], "cps": []}
        for _ in range(rounds):
            for k, v in anyio.run(
                ours, mesh, n_latency, n_throughput, 1, backend_options=event_loop_options()
            ).items():
                o[k] += v
            for k, v in anyio.run(
                floors, port, n_latency, n_throughput, 1, backend_options=event_loop_options()
            ).items():
                f[k] += v
            for mode in LINK_MODES:
                bound_p50[mode] += anyio.run(
                    partial(link_latency, reader_task=mode == "anyio"),
                    link_ports[mode],
                    n_latency,
                    1,
                    backend_options=event_loop_options(),
                )
    p50, p50_lo, p50_hi = median_range(o["p50"])
    fp50 = median_range(f["p50"])[0]
    p99, p99_lo, p99_hi = median_range(o["p99"])
    fp99 = median_range(f["p99"])[0]
    cps, cps_lo, cps_hi = median_range(o["cps"])
    fcps = median_range(f["cps"])[0]
    return [
        Metric(
            "node",
            "bus remote trivial call p50",
            "ms",
            round(p50, 4),
            round(fp50, 4),
            round(p50 / fp50, 2),
            "<= 0.5 ms and <= 2x floor",
            p50 <= 0.5 and p50 <= 2 * fp50,
            round(p50_lo, 4),
            round(p50_hi, 4),
        ),
        bound_metric(
            "bound: our encrypted link alone, no bus, one request at a time, p50",
            bound_p50["inline"],
            fp50,
            "hearthnet.transport to a process answering each message; the bus adds "
            f"{p50 - median_range(bound_p50['inline'])[0]:.3f} ms on top",
        ),
        bound_metric(
            "bound: multiplexing alone with anyio (a task per call, a reader task), our link, no bus, p50",
            bound_p50["anyio"],
            fp50,
            "the server answers each request in an anyio task group; the caller waits on an "
            "event set by the task reading the link",
        ),
        bound_metric(
            "bound: least multiplexing (a bare asyncio task per call), our link, no bus, p50",
            bound_p50["least"],
            fp50,
            "the server starts an asyncio task per request, the caller reads the link itself; "
            f"leaves {max(0.0, 2 * fp50 - median_range(bound_p50['least'])[0]) * 1000:.1f} us of the "
            "2x target for all other bus work on both sides",
        ),
        Metric(
            "node",
            "bus remote trivial call p99",
            "ms",
            round(p99, 4),
            round(fp99, 4),
            round(p99 / fp99, 2),
            "(reported)",
            None,
            round(p99_lo, 4),
            round(p99_hi, 4),
        ),
        Metric(
            "node",
            "bus calls/s with 32 in flight",
            "calls/s",
            round(cps),
            round(fcps),
            round(cps / fcps, 3),
            ">= 5000/s and >= 50% of floor",
            cps >= 5000 and cps >= 0.5 * fcps,
            round(cps_lo),
            round(cps_hi),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
