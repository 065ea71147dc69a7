"""``embed.text`` throughput and query latency, locally and from a remote node.

Ours, two paths to one embedder node (a ``hearthnet node run`` process with the
in-process all-MiniLM-L6-v2 and its default ``OnnxSettings``):

- *local*: this process joins the community as a member (``member_bus``: a
  real CapabilityBus over one authenticated TCP link) and calls ``embed.text``
  with ``provider`` = the embedder node;
- *remote*: the control socket of a second node that has no embedder
  (``HEARTHNET_EMBEDDING=0``); its bus routes the call to the embedder node.

Work: 240-256-token chunks in calls of 32 (what ingest sends), and one-query
calls of 8-20 tokens one after another (p50 latency).

Floor, same run, interleaved round by round: direct onnxruntime in this process
through ``bench.embed_direct`` with the service's settings — one intra-op
thread, two inferences side by side, batches of 2 full-window chunks (what
the service's 512-token batch budget holds) — on the same
texts; for queries, tokenize + one ``session.run`` per query.

    python -m bench.embed [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench.common import Metric, machine, median_range, node_like_process, percentile
from bench.embed_direct import make_chunks, measure_direct
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.services.embedding.model_files import find_model_files
from hearthnet.services.embedding.onnx_backend import OnnxModel, OnnxSettings
from hearthnet.testing import LocalMesh, MeshNode, member_bus, wait_for

MODEL = "all-MiniLM-L6-v2"
BATCH = 32
CHUNK_TOKENS = (240, 256)
QUERY_TOKENS = (8, 20)


def direct_query_latency(model: OnnxModel, queries: list[str]) -> list[float]:
    model.run(model.tokenize(queries[:1]))
    out: list[float] = []
    for q in queries:
        t = time.perf_counter()
        model.run(model.tokenize([q]))
        out.append((time.perf_counter() - t) * 1000)
    return out


async def _measure(
    call: Callable[[list[str]], Awaitable[Any]], chunks: list[str], queries: list[str]
) -> tuple[float, list[float]]:
    """Chunks/s over calls of ``BATCH`` chunks, then each query's latency in ms (after a warm-up)."""
    await call(chunks[:2])
    t = time.perf_counter()
    for s in range(0, len(chunks), BATCH):
        await call(chunks[s : s + BATCH])
    cps = len(chunks) / (time.perf_counter() - t)
    lat: list[float] = []
    for q in queries:
        t = time.perf_counter()
        await call([q])
        lat.append((time.perf_counter() - t) * 1000)
    return cps, lat


async def _local(
    emb: MeshNode, member_home: Path, chunks: list[str], queries: list[str]
) -> tuple[float, list[float]]:
    async with member_bus(emb, member_home) as bus:

        async def call(texts: list[str]) -> Any:
            return await bus.call(
                "embed.text",
                params={"model": MODEL},
                input={"texts": texts, "normalize": True},
                provider=emb.node_id,
                timeout=120,
            )

        return await _measure(call, chunks, queries)


async def _remote(far: MeshNode, chunks: list[str], queries: list[str]) -> tuple[float, list[float]]:
    from hearthnet.client import AsyncClient

    # A long-lived client (a UI) keeps its control connection: no connect and accept per call.
    async with AsyncClient(far.home) as client:

        async def call(texts: list[str]) -> Any:
            res = await client.call(
                "embed.text", params={"model": MODEL}, input={"texts": texts, "normalize": True}, timeout=120
            )
            assert res.provider != far.node_id  # served by the embedder, through far
            return res

        return await _measure(call, chunks, queries)


def run(quick: bool = False) -> list[Metric]:
    node_like_process()
    n_chunks, n_queries, rounds = (32, 30, 3) if quick else (128, 100, 5)
    model = OnnxModel(find_model_files(), OnnxSettings(intra_op_threads=1))
    # measure_direct builds its texts with make_chunks(seed=7): the same call gives the same texts.
    chunks = make_chunks(model, n_chunks, min_tokens=CHUNK_TOKENS[0], max_tokens=CHUNK_TOKENS[1])
    queries = make_chunks(model, n_queries, min_tokens=QUERY_TOKENS[0], max_tokens=QUERY_TOKENS[1], seed=3)
    res: dict[str, list[float]] = {k: [] for k in ("d_cps", "l_cps", "r_cps", "d_p50", "l_p50", "r_p50")}
    with tempfile.TemporaryDirectory(prefix="hn-embed-") as tmp, LocalMesh(Path(tmp)) as mesh:
        mesh.env.update({"HEARTHNET_RAG": "0", "HEARTHNET_LOG_LEVEL": "warning"})
        emb = mesh.add("emb")
        far = mesh.add("far", env={"HEARTHNET_EMBEDDING": "0"})
        member = mesh.add("bench")
        mesh.found(emb)
        mesh.invite(emb, far, "member")
        mesh.invite(emb, member, "member", start=False)
        mesh.wait_full_mesh([emb, far])
        wait_for(
            lambda: any(c["capability"].startswith("embed.text@") for c in far.status()["capabilities"]),
            timeout=60,
            what="far to see embed.text",
        )
        opts = event_loop_options()
        for _ in range(rounds):
            d = measure_direct(
                intra_op_threads=1, parallel=2, batch_size=2, n_chunks=n_chunks, lengths=CHUNK_TOKENS
            )
            res["d_cps"].append(d.chunks_per_s)
            res["d_p50"].append(percentile(direct_query_latency(model, queries), 0.5))
            cps, lat = anyio.run(_local, emb, member.home, chunks, queries, backend_options=opts)
            res["l_cps"].append(cps)
            res["l_p50"].append(percentile(lat, 0.5))
            cps, lat = anyio.run(_remote, far, chunks, queries, backend_options=opts)
            res["r_cps"].append(cps)
            res["r_p50"].append(percentile(lat, 0.5))
    d_cps = median_range(res["d_cps"])[0]
    d_p50 = median_range(res["d_p50"])[0]
    out: list[Metric] = []
    for key, where, min_ratio in (
        ("l", "local (member bus)", 0.9),
        ("r", "remote (via a node without embedder)", 0.85),
    ):
        cps, lo, hi = median_range(res[f"{key}_cps"])
        out.append(
            Metric(
                "embedding",
                f"embed.text chunks/s, {CHUNK_TOKENS[0]}-{CHUNK_TOKENS[1]} tokens, calls of {BATCH}, {where}",
                "chunks/s",
                round(cps, 1),
                round(d_cps, 1),
                round(cps / d_cps, 3),
                f">= {int(min_ratio * 100)}% of direct onnxruntime",
                cps >= min_ratio * d_cps,
                round(lo, 1),
                round(hi, 1),
            )
        )
    for key, where, extra in (
        ("l", "local (member bus)", 2.0),
        ("r", "remote (via a node without embedder)", 3.0),
    ):
        p50, lo, hi = median_range(res[f"{key}_p50"])
        out.append(
            Metric(
                "embedding",
                f"embed.text one-query p50, {where}",
                "ms",
                round(p50, 2),
                round(d_p50, 2),
                round(p50 / d_p50, 2),
                f"<= direct + {extra:g} ms",
                p50 <= d_p50 + extra,
                round(lo, 2),
                round(hi, 2),
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
