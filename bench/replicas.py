"""Corpus replicas (issue 32): a replica of the shared PDFs against copying their bytes and against
ingesting them, all in the same run over real node processes on 127.0.0.1.

Nodes: A hosts the corpus and embeds; B replicates it (an embedder of its own, unused by the copy);
C (trusted, no embedder) measures the floor and asks.

1. **Ingest from scratch**: ``hearthnet ingest PDF... --corpus shared --json`` on A (read, chunk,
   embed, write, events) — wall time.
2. **Floor, copy over the link**: from C, for every document, ``file.fetch`` of its blob from A and
   one ``rag.export`` stream of its chunks and vectors read to the end (nothing written, nothing
   embedded) — wall time, and the bytes of text and vectors received (per chunk).
3. **Replica complete**: ``hearthnet corpus replicate shared`` on B, then until B's replica holds
   every document with nothing behind — wall time.  Targets: <= 1.2x the floor, <= 0.2x the ingest.
4. **Failover**: A is killed (kill -9: the host goes silent); the time from then to the first
   ``rag.query`` from C answered by B.

    python -m bench.replicas [--quick]     (--quick: the 4 smaller papers; default: every shared PDF
                                            that ingests)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import SHARED_DATA, Metric, machine
from hearthnet.contracts.file import FileClient
from hearthnet.frontends.client.client import AsyncClient
from hearthnet.testing import LocalMesh, MeshNode, wait_for

PDFS = SHARED_DATA / "pdfs"
QUICK = [
    "en_paper_creativity_in_ml.pdf",
    "en_paper_naacl06_shinyama_2col.pdf",
    "en_geobase_nhn_data_model.pdf",
    "multicolumn_2col_latex.pdf",
]
CORPUS = "shared"
ISSUE = "32"


def ingestible(quick: bool) -> list[Path]:
    if quick:
        return [PDFS / n for n in QUICK]
    return sorted(PDFS.glob("*.pdf"))


def ingest(node: MeshNode, paths: list[Path]) -> tuple[float, list[dict[str, Any]]]:
    started = time.perf_counter()
    proc = node.cli("ingest", *map(str, paths), "--corpus", CORPUS, "--json", check=False, timeout=7200)
    seconds = time.perf_counter() - started
    results = json.loads(proc.stdout)["results"]
    return seconds, [r for r in results if r.get("ok")]


async def copy_floor(home: Path, host: str, docs: list[dict[str, Any]]) -> tuple[float, int, int]:
    """Blobs and exports of every document from ``host`` to the node at ``home`` (no write, no
    embedding): seconds, bytes of chunk text and vectors, chunks."""
    received = chunks = 0
    async with AsyncClient(home) as client:
        started = time.perf_counter()
        for d in docs:
            await FileClient(client).fetch(d["doc_cid"], hint=host, provider=None, timeout=600)
            async with client.stream(
                "rag.export",
                params={"corpus": CORPUS},
                input={"doc_cid": d["doc_cid"]},
                provider=host,
                timeout=600,
            ) as call:
                async for frame in call.frames():
                    for c in frame.get("chunks", []):
                        received += len(c["vector"]) + len(c["text"].encode())
                        chunks += 1
                await call.result()
        return time.perf_counter() - started, received, chunks


def replica_state(node: MeshNode) -> dict[str, Any] | None:
    out = node.cli_json("call", "rag.replicate", "--input", "{}", timeout=30)["output"]
    return next((r for r in out["replicas"] if r["corpus"] == CORPUS), None)


def run(quick: bool) -> list[Metric]:
    with tempfile.TemporaryDirectory(prefix="hn-replicas-") as tmp:
        mesh = LocalMesh(Path(tmp))
        mesh.env["RAG_EMBED_TIMEOUT_SECONDS"] = "300"
        try:
            a, b = mesh.add("a"), mesh.add("b")
            c = mesh.add("c", env={"HEARTHNET_EMBEDDING": "0"})
            mesh.found(a)
            mesh.invite(a, b, "trusted")
            mesh.invite(a, c, "trusted")
            mesh.wait_full_mesh(timeout=120)
            ingest_s, docs = ingest(a, ingestible(quick))
            total_chunks = sum(int(d["chunks_indexed"]) for d in docs)
            wait_for(
                lambda: any(
                    x["capability"] == "rag.export@1.0" and x["node"] == a.node_id
                    for x in c.status()["capabilities"]
                ),
                timeout=60,
                what="C to see A's rag.export",
            )
            floor_s, wire_bytes, copied = anyio.run(copy_floor, c.home, a.node_id, docs)
            started = time.perf_counter()
            b.cli_json("corpus", "replicate", CORPUS, timeout=7200)
            wait_for(
                lambda: (
                    (s := replica_state(b)) and s["behind"] == 0 and s["docs"] == len(docs) and not s["error"]
                ),
                timeout=7200,
                what="B's replica to be complete",
                interval=0.2,
            )
            replica_wall_s = time.perf_counter() - started
            replica_s = float(replica_state(b)["pass_seconds"])  # type: ignore[index]
            failover_s = failover(a, b, c)
        finally:
            mesh.close()
    return metrics(
        f"{len(docs)} documents, {total_chunks} chunks; replica's own pass (from reading the log to the "
        f"last write); with the CLI that asks and polls: {replica_wall_s:.2f} s",
        replica_s,
        floor_s,
        ingest_s,
        wire_bytes,
        copied,
        failover_s,
    )


def metrics(
    note: str,
    replica_s: float,
    floor_s: float,
    ingest_s: float,
    wire_bytes: int,
    copied: int,
    failover_s: float,
) -> list[Metric]:
    per_chunk = wire_bytes / max(1, copied)
    return [
        Metric(
            ISSUE,
            "replica complete vs copy over the link",
            "s",
            round(replica_s, 3),
            round(floor_s, 3),
            round(replica_s / floor_s, 3),
            "<= 1.2x",
            replica_s <= 1.2 * floor_s,
            note=note,
        ),
        Metric(
            ISSUE,
            "replica complete vs ingest from scratch",
            "s",
            round(replica_s, 3),
            round(ingest_s, 3),
            round(replica_s / ingest_s, 3),
            "<= 0.2x",
            replica_s <= 0.2 * ingest_s,
            note=note,
        ),
        Metric(
            ISSUE,
            "bytes sent per chunk (text + float32 vector)",
            "B",
            round(per_chunk, 1),
            None,
            None,
            "report",
            None,
            note=f"{copied} chunks, {wire_bytes} bytes",
        ),
        Metric(
            ISSUE,
            "failover: host killed to first answer from the replica",
            "s",
            round(failover_s, 3),
            None,
            None,
            "report",
            None,
        ),
    ]


def failover(a: MeshNode, b: MeshNode, c: MeshNode) -> float:
    a.kill()
    killed = time.perf_counter()

    def answered() -> bool:
        proc = c.cli("query", "replica failover", "--corpus", CORPUS, "--json", check=False, timeout=60)
        return proc.returncode == 0 and json.loads(proc.stdout).get("provider") == b.node_id

    wait_for(answered, timeout=300, what="C's query to be answered by B", interval=0.0)
    return time.perf_counter() - killed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
