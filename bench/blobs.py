"""Blob transfer throughput between two processes on loopback.

Ours: this process joins as a trusted member and pushes a blob to a node
process with ``file.put`` (BLAKE3 per chunk, encryption, flow control, fsync
on the receiver).  Floor, same run: the same bytes over a bare anyio TCP
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
from hearthnet.blobs import BlobStore
from hearthnet.cli import event_loop_options
from hearthnet.mesh import LocalMesh, member_bus

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


async def our_transfer(mesh: LocalMesh, store: BlobStore, doc_cid: str) -> float:
    target = mesh.nodes["b"]
    manifest = store.get_manifest(doc_cid)
    async with member_bus(target, mesh.nodes["uploader"].home) as bus:
        t = time.perf_counter()
        async with bus.stream(
            "file.put", input={"manifest": manifest.to_wire()}, provider=target.node_id, timeout=900
        ) as call:
            need = (await call.frames().__anext__())["need"]
            for chunk_id in need:
                await call.send({"chunk_id": chunk_id, "data": store.get_chunk(chunk_id)})
            await call.end_input()
            await call.result()
        elapsed = time.perf_counter() - t
    return manifest.size / elapsed / 1e6


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
        mesh.invite(a, mesh.add("uploader"), "trusted", start=False)
        store = BlobStore(Path(tmp) / "src")
        try:
            for r in range(rounds):
                path = Path(tmp) / f"blob{r}.bin"
                with path.open("wb") as f:
                    for _ in range(size_mb):
                        f.write(os.urandom(1 << 20))
                doc_cid = store.put_file(path).doc_cid
                floor.append(anyio.run(floor_transfer, port, path, backend_options=event_loop_options()))
                options = event_loop_options()
                ours.append(anyio.run(our_transfer, mesh, store, doc_cid, backend_options=options))
                store.delete(doc_cid)
                path.unlink()
        finally:
            store.close()
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
            note="ours includes BLAKE3 per chunk, encryption, and an fsync per chunk on the receiver",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
