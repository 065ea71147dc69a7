"""Tuning of the hybrid fusion on SciFact's *train* queries only (never the test queries).

In process, over all 5,183 SciFact documents (title + abstract, one text each): the dense leg is
exact cosine over the cached MiniLM vectors of ``bench.scifact``, the keyword leg the product's
FTS5 index (:mod:`hearthnet.services.rag.search.fulltext`) in a SQLite database in memory, and the
fusion the product's :func:`~hearthnet.services.rag.search.fusion.fuse` with each leg bringing
the same number of candidates as ``rag.query`` does (words in half the documents or more left
out, as the product does).  Reports nDCG@10 of dense, keyword, the fusion for dense weights
0.0-1.0, and for comparison the same combination with the cosine min-max normalised per query
and reciprocal rank fusion (k = 60).

    python -m bench.scifact_tune
"""

from __future__ import annotations

import csv
import json
import sqlite3

import numpy as np

from bench.scifact import DATA, corpus, doc_text, doc_vectors, ndcg_at_10, query_vectors
from hearthnet.services.rag.search import fulltext
from hearthnet.services.rag.search.fusion import HYBRID_CANDIDATES, fuse

K = 10


def train_queries() -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    """SciFact's train queries that have relevance judgements, and those judgements."""
    qrels: dict[str, set[str]] = {}
    with (DATA / "qrels" / "train.tsv").open(encoding="utf-8", newline="") as fh:
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


def rrf(dense: list[str], kw: list[str], c: int = 60) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in (dense, kw):
        for r, d in enumerate(ranking):
            scores[d] = scores.get(d, 0.0) + 1.0 / (c + r + 1)
    return sorted(scores, key=lambda d: -scores[d])


def main() -> None:
    docs = corpus()
    ids = [d["_id"] for d in docs]
    vecs = doc_vectors()
    queries, qrels = train_queries()
    qvecs = query_vectors([t for _, t in queries])
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(fulltext.SCHEMA)
    fulltext.create_index(db, "scifact")
    for d in docs:
        fulltext.add_document(db, "scifact", d["_id"], [d["_id"]], [doc_text(d)], [{}])
    weights = [round(w * 0.05, 2) for w in range(21)]
    results: dict[str, list[float]] = {"dense": [], "keyword": [], "rrf60": []}
    results.update({f"w{w}": [] for w in weights})
    results.update({f"minmax{w}": [] for w in weights})
    n = HYBRID_CANDIDATES
    for (qid, text), q in zip(queries, qvecs, strict=True):
        sims = vecs @ q
        top = [int(i) for i in np.argsort(-sims)[:n]]
        dense = [ids[i] for i in top]
        skip = fulltext.too_common(db, "scifact", fulltext.single_tokens(text), len(docs))
        expr = fulltext.match_expression(text, skip)
        rows = fulltext.search(db, "scifact", expr, n) if expr else []
        kw = [r.chunk_id for r in rows]
        index = {d: i for i, d in enumerate(ids)}
        cosine = {ids[i]: float(sims[i]) for i in top}
        cosine.update({d: float(sims[index[d]]) for d in kw})
        bm25 = {r.chunk_id: r.bm25 for r in rows}
        rel = qrels[qid]
        results["dense"].append(ndcg_at_10(dense[:K], rel))
        results["keyword"].append(ndcg_at_10(kw[:K], rel))
        results["rrf60"].append(ndcg_at_10(rrf(dense, kw)[:K], rel))
        low, high = min(cosine.values()), max(cosine.values())
        rescaled = {d: (c - low) / (high - low) if high > low else 1.0 for d, c in cosine.items()}
        for w in weights:
            fused = [d for d, _ in fuse(cosine, bm25, dense_weight=w)]
            results[f"w{w}"].append(ndcg_at_10(fused[:K], rel))
            fused = [d for d, _ in fuse(rescaled, bm25, dense_weight=w)]
            results[f"minmax{w}"].append(ndcg_at_10(fused[:K], rel))
    print(
        json.dumps(
            {
                "train_queries": len(queries),
                "ndcg@10": {k: round(float(np.mean(v)), 4) for k, v in results.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
