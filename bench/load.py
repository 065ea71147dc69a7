"""Load: 1,000+ small documents, then 200 concurrent rag.query callers on one node, from two others.

Node A hosts the corpus and the embedder; B and C are members without either.
100 callers on B and 100 on C call ``rag.query`` through their nodes' control
sockets for a fixed time; a caller refused with ``capacity_exceeded`` waits
``min(retry_after_ms, 200 ms)`` and asks again.  Reported against the targets
of the peers table (no peer: the targets are absolute): every call answered
(refused and failed calls counted by code), >= 100 answered queries/s, p99 of
answered calls <= 2 s, A's RSS flat (sampled every 2 s; start and end given).
Also required: no crash, no hang, every failure ``capacity_exceeded`` with a
retry hint.  Bound, same run: the questions/s the model embeds when called
directly right after the run (every query is embedded: no rate on this box
can exceed it).

    python -m bench.load [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from bench.common import SHARED_DATA, PeerMetric, machine, node_like_process, percentile
from hearthnet.client import AsyncClient
from hearthnet.errors import BusError
from hearthnet.testing import LocalMesh, MeshNode

CALLERS_PER_NODE = 100


def _rss_mb(node: MeshNode) -> float:
    assert node.process is not None
    for line in Path(f"/proc/{node.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _write_docs(root: Path, n: int) -> tuple[list[Path], list[str]]:
    """``n`` small text documents from SciFact abstracts, and queries that match some of them."""
    root.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    titles: list[str] = []
    with (SHARED_DATA / "scifact" / "corpus.jsonl").open() as f:
        for line in f:
            doc = json.loads(line)
            # Small documents (about one chunk each), as the drafts seed's e-mail drafts are.
            text = f"{doc.get('title', '')}\n\n{doc.get('text', '')}"[:700]
            path = root / f"{doc['_id']}.txt"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
            titles.append(str(doc.get("title", "")))
            if len(paths) == n:
                break
    return paths, [t for t in titles if len(t) > 20]


async def _drive(
    homes: list[Path], queries: list[str], seconds: float, sample: Any
) -> tuple[list[float], Counter[str], list[int], float]:
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    hints: list[int] = []
    stop_at = anyio.current_time() + seconds
    rng = random.Random(7)

    async def caller(home: Path) -> None:
        client = AsyncClient(home)
        while anyio.current_time() < stop_at:
            query = rng.choice(queries)
            t = time.perf_counter()
            try:
                await client.call("rag.query", {"corpus": "load"}, {"query": query, "k": 5}, timeout=10)
                latencies.append((time.perf_counter() - t) * 1000)
            except BusError as exc:
                errors[exc.code] += 1
                if exc.retry_after_ms:
                    hints.append(exc.retry_after_ms)
                    # a well-behaved client honours the hint (bounded so the test keeps pressure)
                    await anyio.sleep(min(exc.retry_after_ms, 200) / 1000)

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sample, stop_at)
        for home in homes:
            for _ in range(CALLERS_PER_NODE):
                tg.start_soon(caller, home)
    return latencies, errors, hints, anyio.current_time() - started


def run(quick: bool = False) -> list[PeerMetric]:
    node_like_process()
    n_docs, seconds = (1000, 75) if quick else (1200, 180)
    with tempfile.TemporaryDirectory() as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env["HEARTHNET_LOG_LEVEL"] = "warning"
        a = mesh.add("a")
        b = mesh.add("b", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        c = mesh.add("c", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        mesh.found(a)
        mesh.invite(a, b, "member")
        mesh.invite(a, c, "member")
        mesh.wait_full_mesh(timeout=90)
        paths, queries = _write_docs(Path(tmp) / "docs", n_docs)
        t = time.monotonic()
        out = a.cli_json("ingest", str(Path(tmp) / "docs"), "--corpus", "load", timeout=7200)
        ingest_s = time.monotonic() - t
        ok = sum(1 for r in out["results"] if r["ok"])
        rss: list[tuple[float, float]] = []

        async def sample(stop_at: float) -> None:
            t0 = anyio.current_time()
            while anyio.current_time() < stop_at:
                rss.append((anyio.current_time() - t0, _rss_mb(a)))
                await anyio.sleep(2.0)

        latencies, errors, hints, elapsed = anyio.run(_drive, [b.home, c.home], queries, seconds, sample)
        alive = a.process is not None and a.process.poll() is None
        capacity = _embed_capacity(queries)
        after_first_minute = [m for s, m in rss if s >= 60] or [m for _, m in rss[len(rss) // 2 :]]
        growth = (max(after_first_minute) - min(after_first_minute)) if after_first_minute else 0.0
    answered = len(latencies)
    refused = errors.get("capacity_exceeded", 0)
    unexplained = sum(v for k, v in errors.items() if k != "capacity_exceeded")
    hinted = len(hints) == refused
    if not latencies:
        raise RuntimeError(f"no rag.query was answered under load; errors by code {dict(errors)}")
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    qps = answered / elapsed
    callers = CALLERS_PER_NODE * 2
    rss_start = rss[0][1] if rss else 0.0
    rss_end = rss[-1][1] if rss else 0.0
    setting = f"{callers} callers on 2 nodes, {elapsed:.0f} s"
    return [
        PeerMetric(
            "load",
            f"load: calls not answered ({setting})",
            "calls",
            float(sum(errors.values())),
            None,
            "",
            "<= 0 (every call answered)",
            not errors,
            note=f"{answered} answered; not answered by code {dict(errors)}; "
            f"{ok}/{len(paths)} docs ingested in {ingest_s:.0f} s",
        ),
        PeerMetric(
            "load",
            f"load: rag.query answered/s ({setting})",
            "queries/s",
            round(qps, 1),
            None,
            "",
            ">= 100/s",
            qps >= 100,
        ),
        PeerMetric(
            "load",
            "load: queries/s this box embeds now, the model called directly (bound)",
            "queries/s",
            round(capacity, 1),
            None,
            "",
            "(bound)",
            None,
            note=f"right after the run, nodes idle: the same questions in batches of {CAPACITY_BATCH}, "
            f"two 1-thread inferences at once (the node's settings), {CAPACITY_SECONDS:.0f} s; "
            f"answered/s is {qps / capacity:.2f}x of it",
        ),
        PeerMetric(
            "load",
            f"load: p99 of answered calls ({setting})",
            "ms",
            round(p99, 1),
            None,
            "",
            "<= 2000 ms",
            p99 <= 2000,
            note=f"p50 {p50:.0f} ms",
        ),
        PeerMetric(
            "load",
            "load: node RSS growth after the first minute",
            "MB",
            round(growth, 1),
            None,
            "",
            "<= 50 MB (flat)",
            growth <= 50,
            round(min((m for _, m in rss), default=0.0), 1),
            round(max((m for _, m in rss), default=0.0), 1),
            note=f"RSS at the start {rss_start:.0f} MB, at the end {rss_end:.0f} MB; min-max over the run; "
            f"samples (MB) {[round(m) for _, m in rss[::5]]}",
        ),
        PeerMetric(
            "load",
            "load: failures other than capacity_exceeded with a retry hint, or a crash or hang",
            "count",
            float(unexplained + (0 if hinted else 1) + (0 if alive else 1)),
            None,
            "",
            "<= 0",
            unexplained == 0 and hinted and alive,
            note=f"A alive after the run: {alive}; {refused} refusals, {len(hints)} with retry_after_ms",
        ),
    ]


CAPACITY_BATCH = 32
CAPACITY_SECONDS = 10.0


def _embed_capacity(queries: list[str]) -> float:
    """Questions/s the model embeds when called directly on this box now: the ceiling of any
    rag.query rate here (every query is embedded), measured beside the run under the same load."""
    import threading

    from hearthnet.services.embedding.model_files import find_model_files
    from hearthnet.services.embedding.onnx_backend import OnnxModel, OnnxSettings

    model = OnnxModel(find_model_files(), OnnxSettings())
    model.run(model.tokenize(queries[:CAPACITY_BATCH]))  # warm up
    done = [0, 0]
    stop_at = time.perf_counter() + CAPACITY_SECONDS

    def work(slot: int) -> None:
        i = slot * CAPACITY_BATCH
        while time.perf_counter() < stop_at:
            batch = [queries[(i + j) % len(queries)] for j in range(CAPACITY_BATCH)]
            model.run(model.tokenize(batch))
            done[slot] += len(batch)
            i += 2 * CAPACITY_BATCH

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(slot,)) for slot in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    metrics = run(args.quick)
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in metrics]}, indent=2))


if __name__ == "__main__":
    main()
