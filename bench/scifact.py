"""SciFact retrieval quality through the mesh: nDCG@10 of ``rag.query`` from another node, for
each query mode (``dense``, ``keyword``, ``hybrid``) in the same run.

Ours: the SciFact documents (title + abstract, one ``<doc id>.txt`` file each)
are ingested with ``hearthnet ingest DIR --corpus scifact`` on a node with the
embedder and RAG; the 300 test queries are then asked with ``rag.query`` through
the control socket of *another* node (no corpus, no embedder), which routes
them over the bus, once per mode.  The default mode (``hybrid``; its fusion was
tuned on the *train* queries, ``bench.scifact_tune``) has the target >= 0.70.
The chunks returned (k = 20) are mapped back to documents by
their title (the file name stem = SciFact doc id), deduplicated, and the first
10 documents are scored with nDCG@10 against ``qrels/test.tsv``.

Floor, same run: brute-force exact cosine search in this process over the same
documents, embedded with the same model (int8 all-MiniLM-L6-v2, mean pooling,
truncation 256, title + abstract in one text) — 0.6468 on the full corpus.

Peer, same run: the LangChain-style pipeline of ``bench.peers_rag`` indexes the
same documents with its own chunking (1,000 / 200 characters) into chromadb in
this process and answers the same queries (k = 20 chunks, deduplicated to the
first 10 documents, scored the same way).

``--quick`` uses the documents relevant to 50 test queries plus 500 others
(and only those 50 queries); both ours and the floor search that same subset.

``--prebuilt`` skips the ingest and the peer: the documents go straight into a store
(``CorpusStore``, one chunk per document with its cached vector), which the RAG node then
serves; the queries are asked the same way, each mode in turn (the quality figures only).

    python -m bench.scifact [--quick] [--prebuilt]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    SHARED_DATA,
    Metric,
    PeerMetric,
    machine,
    median_range,
    node_like_process,
    percentile,
)

DATA = SHARED_DATA / "scifact"
CACHE = Path(__file__).resolve().parent / "results" / "cache"
MODEL = "all-MiniLM-L6-v2"
TARGET_NDCG = 0.645
TARGET_DEFAULT_NDCG = 0.70
MODES = ("dense", "keyword", "hybrid")


# -- data ------------------------------------------------------------------------------------
def corpus() -> list[dict[str, str]]:
    """All 5,183 documents in file order: ``{"_id", "title", "text"}``."""
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def doc_text(doc: dict[str, str]) -> str:
    return f"{doc['title']}\n{doc['text']}"


def test_queries() -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    """The 300 test queries ``[(query id, text)]`` and their relevant doc ids."""
    qrels: dict[str, set[str]] = {}
    with (DATA / "qrels" / "test.tsv").open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader)
        for row in reader:
            if row and int(row[2]) > 0:
                qrels.setdefault(row[0].strip(), set()).add(row[1].strip())
    texts: dict[str, str] = {}
    with (DATA / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts[row["_id"]] = row["text"]
    return [(qid, texts[qid]) for qid in sorted(qrels, key=int)], qrels


def _embedder() -> Any:
    from bench.rag_recall import OnnxMiniLM

    return OnnxMiniLM()


def doc_vectors() -> np.ndarray:
    """Vectors of all SciFact documents (file order), cached in ``bench/results/cache``."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"scifact-docs-{MODEL}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    docs = corpus()
    texts = [doc_text(d) for d in docs]
    model = _embedder()
    # Length-sorted batches of 8: little padding, original order restored.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    t0 = time.perf_counter()
    for s in range(0, len(order), 8):
        idx = order[s : s + 8]
        out[idx] = model.embed([texts[i] for i in idx], batch_size=8)
    print(
        json.dumps({"embedded_scifact_docs": len(texts), "s": round(time.perf_counter() - t0, 1)}), flush=True
    )
    np.save(path, out)
    return out


def query_vectors(texts: list[str]) -> np.ndarray:
    """Query vectors (in-process, same model), cached by the texts' hash."""
    import hashlib

    CACHE.mkdir(parents=True, exist_ok=True)
    key = hashlib.blake2b("\x00".join(texts).encode(), digest_size=8).hexdigest()
    path = CACHE / f"scifact-queries-{key}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    vecs: np.ndarray = _embedder().embed(texts, batch_size=16)
    np.save(path, vecs)
    return vecs


# -- scoring ---------------------------------------------------------------------------------
def ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return dcg / ideal if ideal else 0.0


def exact_ranking(doc_ids: list[str], vecs: np.ndarray, q: np.ndarray, k: int = 10) -> list[list[str]]:
    sims = q @ vecs.T
    top = np.argsort(-sims, axis=1)[:, :k]
    return [[doc_ids[j] for j in row] for row in top]


def subset(quick: bool) -> tuple[list[int], list[tuple[str, str]], dict[str, set[str]]]:
    """Document indices and test queries for this run (all of them unless ``quick``)."""
    docs = corpus()
    queries, qrels = test_queries()
    if not quick:
        return list(range(len(docs))), queries, qrels
    rng = random.Random(11)
    queries = rng.sample(queries, 50)
    wanted = {d for qid, _ in queries for d in qrels[qid]}
    idx = [i for i, d in enumerate(docs) if d["_id"] in wanted]
    others = [i for i, d in enumerate(docs) if d["_id"] not in wanted]
    idx += rng.sample(others, 500)
    return sorted(idx), queries, qrels


# -- ours ------------------------------------------------------------------------------------
async def _ask_all(home: Path, texts: list[str], k: int, mode: str) -> tuple[list[list[str]], list[float]]:
    from hearthnet.client import AsyncClient

    client = AsyncClient(home)
    ranked: list[list[str]] = []
    lat: list[float] = []
    for text in texts:
        t = time.perf_counter()
        res = await client.call(
            "rag.query",
            params={"corpus": "scifact"},
            input={"query": text, "k": k, "include_text": False, "mode": mode},
        )
        if res.meta.get("mode") != mode:
            raise RuntimeError(f"asked for {mode}, answered by {res.meta.get('mode')}")
        lat.append((time.perf_counter() - t) * 1000)
        seen: list[str] = []
        for c in res.output["chunks"]:
            doc = str(c["metadata"].get("doc_title", ""))
            if doc and doc not in seen:
                seen.append(doc)
        ranked.append(seen[:10])
    return ranked, lat


def run(quick: bool = False) -> list[Metric | PeerMetric]:
    node_like_process()
    from hearthnet.testing import LocalMesh

    idx, queries, qrels = subset(quick)
    docs = corpus()
    all_vecs = doc_vectors()
    doc_ids = [docs[i]["_id"] for i in idx]
    qtexts = [t for _, t in queries]
    qvecs = query_vectors(qtexts)

    # Floor: brute force in-process over the same documents.
    floor_rank = exact_ranking(doc_ids, all_vecs[idx], qvecs)
    floor = float(
        np.mean([ndcg_at_10(r, qrels[qid]) for r, (qid, _) in zip(floor_rank, queries, strict=True)])
    )

    with tempfile.TemporaryDirectory(prefix="hn-scifact-") as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        src = Path(tmp) / "docs"
        src.mkdir()
        for i in idx:
            (src / f"{docs[i]['_id']}.txt").write_text(doc_text(docs[i]), encoding="utf-8")
        mesh.env.update({"HEARTHNET_LOG_LEVEL": "warning"})
        a = mesh.add("rag")
        asker = mesh.add("asker", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        mesh.found(a)
        mesh.invite(a, asker, "member")
        mesh.wait_full_mesh()
        t0 = time.perf_counter()
        out = a.cli_json("ingest", str(src), "--corpus", "scifact", timeout=7200)
        ingest_s = time.perf_counter() - t0
        failed = [r for r in out["results"] if not r.get("ok")]
        chunks = sum(int(r.get("chunks_indexed", 0)) for r in out["results"] if r.get("ok"))
        from hearthnet.testing import wait_for

        wait_for(
            lambda: any(
                c["capability"].startswith("rag.query@") and c["params"].get("corpus") == "scifact"
                for c in asker.status()["capabilities"]
            ),
            timeout=60,
            what="asker to see the scifact corpus",
        )
        by_mode = {mode: asyncio.run(_ask_all(asker.home, qtexts, 20, mode)) for mode in MODES}
        from bench.peers_rag import langchain_scifact

        t0 = time.perf_counter()
        peer, peer_chunks = langchain_scifact([docs[i] for i in idx], queries, qrels, Path(tmp) / "peer")
        peer_s = time.perf_counter() - t0
    scores = {
        mode: float(np.mean([ndcg_at_10(r, qrels[qid]) for r, (qid, _) in zip(ranked, queries, strict=True)]))
        for mode, (ranked, _) in by_mode.items()
    }
    ours = scores["dense"]
    lat = by_mode["dense"][1]
    label = f"{len(idx)} docs, {len(queries)} queries" + (" (quick subset)" if quick else "")
    p50, lo, _ = median_range(lat)
    target_ok = ours >= TARGET_NDCG if not quick else ours >= floor - 0.005
    per_mode: list[Metric | PeerMetric] = []
    for mode in ("keyword", "hybrid"):
        default = mode == "hybrid"
        per_mode.append(
            Metric(
                "scifact",
                f"SciFact nDCG@10 via rag.query mode {mode} from another node ({label})",
                "nDCG@10",
                round(scores[mode], 4),
                round(ours, 4),
                round(scores[mode] / ours, 3),
                f">= {TARGET_DEFAULT_NDCG} (the default mode)" if default and not quick else "(reported)",
                (scores[mode] >= TARGET_DEFAULT_NDCG) if default and not quick else None,
                note="baseline: mode dense, same run",
            )
        )
        mp50, mlo, _ = median_range(by_mode[mode][1])
        per_mode.append(
            Metric(
                "scifact",
                f"SciFact rag.query mode {mode} p50 from another node",
                "ms",
                round(mp50, 1),
                round(p50, 1),
                round(mp50 / p50, 3),
                "(reported)",
                None,
                round(mlo, 1),
                round(percentile(by_mode[mode][1], 0.95), 1),
                note="baseline: mode dense p50, same run; max shown is p95",
            )
        )
    return [
        *per_mode,
        PeerMetric(
            "scifact",
            f"SciFact nDCG@10, rag.query from another node vs the LangChain-style pipeline ({label})",
            "nDCG@10",
            round(ours, 4),
            round(peer, 4),
            "LangChain-style",
            "(reported)",
            None,
            note=f"chunks: ours {chunks}, peer {peer_chunks} (peer indexed and queried in {peer_s:.0f} s)",
        ),
        Metric(
            "scifact",
            f"SciFact nDCG@10 via rag.query mode dense from another node ({label})",
            "nDCG@10",
            round(ours, 4),
            round(floor, 4),
            round(ours / floor, 3),
            ">= 0.645" if not quick else ">= floor - 0.005 (subset; 0.645 is for the full corpus)",
            target_ok,
            note=f"{len(failed)} ingest failures; {chunks} chunks",
        ),
        Metric(
            "scifact",
            f"SciFact ingest via CLI ({len(idx)} .txt docs)",
            "docs/s",
            round(len(idx) / ingest_s, 1),
            None,
            None,
            "(reported)",
            None,
            note=f"{ingest_s:.0f} s for {chunks} chunks",
        ),
        Metric(
            "scifact",
            "SciFact rag.query mode dense p50 from another node",
            "ms",
            round(p50, 1),
            None,
            None,
            "(reported)",
            None,
            round(lo, 1),
            round(percentile(lat, 0.95), 1),
            note="max shown is p95",
        ),
    ]


def prebuilt_store(root: Path, idx: list[int]) -> None:
    """The corpus built directly with ``CorpusStore``: one chunk per document (title + abstract,
    its cached vector), as ``--prebuilt`` serves it."""
    from hearthnet.services.rag.chunks import Chunk
    from hearthnet.services.rag.store import CorpusStore

    docs, vecs = corpus(), doc_vectors()
    st = CorpusStore(root)
    try:
        st.create_corpus("scifact", embedding_model=MODEL, dim=vecs.shape[1])
        for i in idx:
            chunk = Chunk(
                chunk_id=f"sf{i}",
                text=doc_text(docs[i]),
                metadata={
                    "doc_cid": f"doc{i}",
                    "doc_title": docs[i]["_id"],
                    "page": 1,
                    "chunk_index": 0,
                    "language": "en",
                    "char_start": 0,
                    "char_end": len(doc_text(docs[i])),
                    "tokens": 0,
                },
            )
            st.add_document("scifact", [chunk], vecs[i : i + 1])
    finally:
        st.close()


def run_prebuilt(quick: bool = False) -> list[Metric | PeerMetric]:
    """Each mode's nDCG@10 through ``rag.query`` from another node, on a store built directly (no
    CLI ingest, no peer): the quality figures alone, in minutes rather than the ingest's half hour."""
    node_like_process()
    import shutil

    from hearthnet.testing import LocalMesh, wait_for

    idx, queries, qrels = subset(quick)
    qtexts = [t for _, t in queries]
    with tempfile.TemporaryDirectory(prefix="hn-scifact-") as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env.update({"HEARTHNET_LOG_LEVEL": "warning"})
        a = mesh.add("rag")
        asker = mesh.add("asker", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        prebuilt_store(Path(tmp) / "store", idx)
        shutil.rmtree(a.home / "rag", ignore_errors=True)
        shutil.copytree(Path(tmp) / "store", a.home / "rag")
        mesh.found(a)
        mesh.invite(a, asker, "member")
        mesh.wait_full_mesh()
        wait_for(
            lambda: any(
                c["capability"].startswith("rag.query@") and c["params"].get("corpus") == "scifact"
                for c in asker.status()["capabilities"]
            ),
            timeout=60,
            what="asker to see the scifact corpus",
        )
        by_mode = {mode: asyncio.run(_ask_all(asker.home, qtexts, 20, mode)) for mode in MODES}
    label = f"{len(idx)} docs, {len(queries)} queries, prebuilt store" + (" (quick subset)" if quick else "")
    out: list[Metric | PeerMetric] = []
    for mode, (ranked, lat) in by_mode.items():
        score = float(
            np.mean([ndcg_at_10(r, qrels[qid]) for r, (qid, _) in zip(ranked, queries, strict=True)])
        )
        default = mode == "hybrid" and not quick
        out.append(
            Metric(
                "scifact",
                f"SciFact nDCG@10 via rag.query mode {mode} from another node ({label})",
                "nDCG@10",
                round(score, 4),
                None,
                None,
                f">= {TARGET_DEFAULT_NDCG} (the default mode)" if default else "(reported)",
                score >= TARGET_DEFAULT_NDCG if default else None,
                note=f"p50 {median_range(lat)[0]:.1f} ms, p95 {percentile(lat, 0.95):.1f} ms",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--prebuilt", action="store_true", help="quality per mode only, on a store built directly"
    )
    parser.add_argument("--cache-only", action="store_true", help="embed and cache the vectors, then stop")
    args = parser.parse_args()
    if args.cache_only:
        doc_vectors()
        return
    metrics = run_prebuilt(args.quick) if args.prebuilt else run(args.quick)
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in metrics]}, indent=2))


if __name__ == "__main__":
    main()
