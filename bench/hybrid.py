"""Cost of the query modes: ``rag.query`` p50 in ``hybrid`` (and ``keyword``) mode beside ``dense``
at 10k chunks, from another node, unfiltered and filtered, all in the same run.

The store is built directly with ``CorpusStore`` in the RAG node's home before it starts: 10,000
chunks whose vectors are those of ``bench.rag`` (the 5,183 SciFact abstracts embedded with MiniLM,
then perturbed, renormalised copies) and whose texts are the abstracts themselves (copy ``i`` has
the text of abstract ``i mod 5,183``), in 1,000-chunk documents, ``language`` cycling en/de/fr.
Queries are SciFact test claims as text, asked through the control socket of a node without RAG
or embedder (k = 10, no text); for each query the modes are taken in turn (dense, hybrid,
keyword), so a burst of CPU stolen by other guests falls on all of them alike.  Filtered:
``{"language": "de"}`` (a third of the chunks).  Target: hybrid p50 <= 1.3x dense p50, both ways.

    python -m bench.hybrid [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import Metric, machine, median_range, node_like_process, percentile
from bench.rag import LANGS, MODEL, dataset
from bench.scifact import CACHE, corpus, doc_text, test_queries
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.testing import LocalMesh, wait_for

N = 10_000
CORPUS = "hybrid10k"
MODES = ("dense", "hybrid", "keyword")
TARGET = 1.3


def build_store(root: Path) -> None:
    """The 10k-chunk corpus with texts (see the module docstring)."""
    from hearthnet.services.rag.chunks import Chunk
    from hearthnet.services.rag.store import CorpusStore

    data = dataset(N)
    docs = corpus()
    st = CorpusStore(root)
    try:
        st.create_corpus(CORPUS, embedding_model=MODEL, dim=data.shape[1])
        for d, a in enumerate(range(0, N, 1000)):
            chunks = [
                Chunk(
                    chunk_id=f"v{i}",
                    text=doc_text(docs[i % len(docs)]),
                    metadata={
                        "doc_cid": f"doc{d}",
                        "doc_title": docs[i % len(docs)]["_id"],
                        "page": 1,
                        "chunk_index": i,
                        "language": LANGS[i % 3],
                        "char_start": 0,
                        "char_end": 0,
                        "tokens": 0,
                    },
                )
                for i in range(a, min(N, a + 1000))
            ]
            st.add_document(CORPUS, chunks, data[a : a + len(chunks)])
    finally:
        st.close()


def cached_store() -> Path:
    from hearthnet.services.rag.store import SCHEMA_VERSION

    key = hashlib.blake2b(
        json.dumps({"n": N, "schema": SCHEMA_VERSION, "keyword": 2, "v": 1}).encode(), digest_size=6
    ).hexdigest()
    path = CACHE / f"store-hybrid-{key}"
    if (path / "done").exists():
        return path
    tmp = path.with_name(path.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    build_store(tmp)
    (tmp / "done").write_text("")
    tmp.rename(path)
    return path


async def _ask(home: Path, texts: list[str], flt: dict[str, Any] | None) -> dict[str, list[float]]:
    from hearthnet.client import AsyncClient

    out: dict[str, list[float]] = {m: [] for m in MODES}
    async with AsyncClient(home) as client:

        async def one(text: str, mode: str) -> float:
            inp: dict[str, Any] = {"query": text, "k": 10, "include_text": False, "mode": mode}
            if flt:
                inp["filter"] = flt
            t = time.perf_counter()
            res = await client.call("rag.query", params={"corpus": CORPUS}, input=inp)
            ms = (time.perf_counter() - t) * 1000
            if res.meta.get("mode") != mode or len(res.output["chunks"]) != 10:
                raise RuntimeError(
                    f"{mode}: answered {res.meta.get('mode')} with {len(res.output['chunks'])}"
                )
            return ms

        for text in texts[:3]:  # warm every path
            for mode in MODES:
                await one(text, mode)
        for text in texts:
            for mode in MODES:
                out[mode].append(await one(text, mode))
    return out


def run(quick: bool = False) -> list[Metric]:
    node_like_process()
    n_q, rounds = (40, 2) if quick else (150, 3)
    queries, _ = test_queries()
    texts = [t for _, t in queries][:n_q]
    cache = cached_store()
    runs: dict[str, dict[str, list[list[float]]]] = {w: {m: [] for m in MODES} for w in ("plain", "filtered")}
    with tempfile.TemporaryDirectory(prefix="hn-hybrid-") as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env.update({"HEARTHNET_LOG_LEVEL": "warning"})
        node = mesh.add("rag")
        far = mesh.add("far", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        shutil.rmtree(node.home / "rag", ignore_errors=True)
        shutil.copytree(cache, node.home / "rag", ignore=shutil.ignore_patterns("done"))
        mesh.found(node)
        mesh.invite(node, far, "member")
        mesh.wait_full_mesh([node, far])
        wait_for(
            lambda: any(
                c["capability"].startswith("rag.query@") and c["params"].get("corpus") == CORPUS
                for c in far.status()["capabilities"]
            ),
            timeout=60,
            what="far to see the corpus",
        )
        opts = event_loop_options()
        for _ in range(rounds):
            for which, flt in (("plain", None), ("filtered", {"language": "de"})):
                got = anyio.run(_ask, far.home, texts, flt, backend_options=opts)
                for mode in MODES:
                    runs[which][mode].append(got[mode])

    def p50(which: str, mode: str) -> tuple[float, float, float]:
        return median_range([percentile(r, 0.5) for r in runs[which][mode]])

    metrics: list[Metric] = []
    for which, label in (("plain", "unfiltered"), ("filtered", "filtered language = 1/3")):
        dense = p50(which, "dense")[0]
        for mode in ("hybrid", "keyword"):
            ours, lo, hi = p50(which, mode)
            target = mode == "hybrid"
            metrics.append(
                Metric(
                    "hybrid",
                    f"rag.query mode {mode} p50 at 10k chunks from another node, {label}",
                    "ms",
                    round(ours, 2),
                    round(dense, 2),
                    round(ours / dense, 3),
                    f"<= {TARGET}x dense" if target else "(reported)",
                    ours <= TARGET * dense if target else None,
                    round(lo, 2),
                    round(hi, 2),
                    note=f"floor: mode dense p50, same run ({len(texts)} queries x {rounds} rounds); "
                    f"min-max over rounds",
                )
            )
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
