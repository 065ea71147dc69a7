"""Blob transfer throughput between two processes on loopback.

Ours: the product path of ``hearthnet file put PATH --on NODE``: node A holds
the blob (``file.import``) and ``file.push`` sends it to node B with
``file.put`` (the sender reads and verifies chunks ahead; BLAKE3 per chunk on
both sides, encryption, flow control; the receiver makes chunks durable
before answering).  Timed from the push call to its answer.  Floor, same run:
the same bytes read from the same file and sent over a bare anyio TCP
connection to a process that reads and discards them.

    python -m bench.blobs [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench.common import Metric, machine, median_range
from hearthnet.cli import event_loop_options
from hearthnet.mesh import LocalMesh, MeshNode

SINK = r"""
import anyio
async def handle(stream):
    async with stream:
        total = 0
        try:
            while True:
                total += len(await stream.receive(1 << 20))
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
async def main():
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    print(listener.extra(anyio.abc.SocketAttribute.local_port), flush=True)
    await listener.serve(handle)
anyio.run(main)
"""


async def floor_transfer(port: int, path: Path) -> float:
    t = time.perf_counter()
    size = 0
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        with path.open("rb") as f:
            while block := f.read(256 * 1024):
                await s.send(block)
                size += len(block)
        await s.send_eof()
        try:
            await s.receive()
        except anyio.EndOfStream:
            pass
    return size / (time.perf_counter() - t) / 1e6


async def our_transfer(a: MeshNode, b: MeshNode, doc_cid: str, size: int) -> float:
    from hearthnet.client import AsyncClient

    client = AsyncClient(a.home)
    t = time.perf_counter()
    res = await client.call("file.push", input={"doc_cid": doc_cid, "node": b.node_id}, timeout=900)
    elapsed = time.perf_counter() - t
    assert res.output["chunks_received"] == res.output["chunks_total"], res.output
    return size / elapsed / 1e6


def run(quick: bool = False) -> list[Metric]:
    size_mb, rounds = (48, 3) if quick else (192, 5)
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE)
    assert sink.stdout is not None
    port = int(sink.stdout.readline())
    ours: list[float] = []
    floor: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env.update({"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "HEARTHNET_LOG_LEVEL": "warning"})
        a, b = mesh.add("a"), mesh.add("b")
        mesh.found(a)
        mesh.invite(a, b, "member")
        mesh.wait_full_mesh([a, b])
        try:
            for r in range(rounds):
                path = Path(tmp) / f"blob{r}.bin"
                with path.open("wb") as f:
                    for _ in range(size_mb):
                        f.write(os.urandom(1 << 20))
                doc_cid = a.cli_json("file", "put", str(path))["doc_cid"]
                os.sync()  # start both measurements with clean page cache writeback
                floor.append(anyio.run(floor_transfer, port, path, backend_options=event_loop_options()))
                options = event_loop_options()
                size = path.stat().st_size
                ours.append(anyio.run(our_transfer, a, b, doc_cid, size, backend_options=options))
                path.unlink()
        finally:
            sink.kill()
    o, o_lo, o_hi = median_range(ours)
    f = median_range(floor)[0]
    return [
        Metric(
            "blobs",
            f"file.put node-to-node throughput ({size_mb} MB)",
            "MB/s",
            round(o, 1),
            round(f, 1),
            round(o / f, 3),
            ">= 40% of bare TCP",
            o >= 0.4 * f,
            round(o_lo, 1),
            round(o_hi, 1),
            note="ours: file.push A->B, BLAKE3 per chunk on both sides, encryption, chunks durable on B",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
