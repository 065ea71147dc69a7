"""RAG against the pipeline a user would write with the popular libraries ("LangChain-style").

Peer (:class:`LangChainStyle`): pypdf's ``extract_text()`` per page, LangChain's
``RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)``, the same
int8 all-MiniLM-L6-v2 called directly in batches of 32 (``OnnxModel``, as
``bench.embed_direct`` runs it, with onnxruntime's own defaults: one intra-op
thread per core, spinning and memory arena on; truncation 256, mean pooling,
L2 norm), and a ``chromadb.PersistentClient`` collection (cosine) with ``add``
and ``query``, all in one process.  Its timed runs happen in a child process
that never imports HearthNet's reader, whose content-stream tokenizer replaces
pypdf's for the whole process (``specs/rag.md``): the peer reads with pypdf as
released.  Model loading and imports are outside its time (a node has them
done before it is asked), a warm-up batch too.

Ours: a node with embedder and RAG; ``hearthnet ingest`` (a CLI process, wall
time) and ``rag.query`` through another node without either.

1. Ingest of the first 100 pages of ``de_geotopo_lecture_notes.pdf`` (what
   ``bench.rag`` ingests).  Target: ours <= 0.7x the peer.
2. Ingest of 1,000 small texts (``--quick``: 300): SciFact title + abstract of
   200-300 words, one ``.txt`` each, ``hearthnet ingest DIR`` against the peer.
   Base, same run: embedding the texts alone (one vector per text, same direct
   model, batches of 32).  Target: ours <= 1.3x the base.
3. One small text through the client: ``file.import`` + ``rag.ingest`` on a kept
   ``AsyncClient`` connection, p50 over new texts; the peer's figure is the same
   text read, split, embedded and added.  Target: ours <= 100 ms.
4. Query p50 at 10k chunks: the store of ``bench.rag`` (its cache, real SciFact
   vectors) holding 10k chunks, ``rag.query`` (k = 10, no text) from another
   node; the peer: a chroma collection of the same 10k vectors and metadata,
   query embedded and searched in process.  Taken in turn per query (the
   peer, then ours) so both see the same load.  Target: ours <= 1.0x.

SciFact nDCG@10 of both pipelines is measured by ``bench.scifact`` (same run,
same documents) with :func:`langchain_scifact`.

    python -m bench.peers_rag [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from bench.common import PeerMetric, machine, median_range, node_like_process, percentile
from bench.scifact import CACHE, corpus, doc_text, ndcg_at_10, test_queries

CHUNK_SIZE = 1000
CHUNK_OVERLAP = 200
BATCH = 32
PDF_PAGES = 100
SMALL_WORDS = (200, 300)
SPIN_SECONDS = 0.15
"""After the peer's query, before ours: onnxruntime's idle threads spin by default and would take a core."""
EMBED_TIMEOUT = 120
"""Seconds each embed.text call of our ingests may take (``RAG_EMBED_TIMEOUT_SECONDS``, 10 by default)."""


class LangChainStyle:
    """The pipeline a user writes with pypdf, LangChain's splitter, the model and chromadb."""

    def __init__(self, chroma_dir: Path, collection: str, *, create: bool = True) -> None:
        import chromadb
        from chromadb.config import Settings
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        from hearthnet.services.embedding.model_files import find_model_files
        from hearthnet.services.embedding.onnx_backend import OnnxModel, OnnxSettings

        self.splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        settings = OnnxSettings(
            intra_op_threads=os.cpu_count() or 1, allow_spinning=True, enable_mem_arena=True
        )
        self.model = OnnxModel(find_model_files(), settings)
        self.client = chromadb.PersistentClient(
            path=str(chroma_dir), settings=Settings(anonymized_telemetry=False)
        )
        if create:
            self.collection = self.client.create_collection(
                collection, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
            )
        else:
            self.collection = self.client.get_collection(collection, embedding_function=None)
        self.embed(["warm up the model"])

    def close(self) -> None:
        """Let chromadb release its files (its clients share one system per path)."""
        self.client.clear_system_cache()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``, in order, in batches of 32."""
        out: list[np.ndarray] = []
        for s in range(0, len(texts), BATCH):
            v = self.model.run(self.model.tokenize(list(texts[s : s + BATCH])))
            out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
        return np.vstack(out) if out else np.zeros((0, 384), dtype=np.float32)

    def add(
        self,
        ids: list[str],
        texts: list[str] | None,
        metadatas: list[dict[str, Any]],
        vectors: np.ndarray | None = None,
    ) -> None:
        """Embed ``texts`` (unless ``vectors`` are given) and add them in batches chroma accepts."""
        if vectors is None:
            assert texts is not None
            vectors = self.embed(texts)
        step = min(self.client.get_max_batch_size(), 5000)
        for a in range(0, len(ids), step):
            b = a + step
            self.collection.add(
                ids=ids[a:b],
                embeddings=vectors[a:b],
                documents=texts[a:b] if texts is not None else None,
                metadatas=metadatas[a:b],  # type: ignore[arg-type]
            )

    def split(self, name: str, text: str, **meta: Any) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        pieces = self.splitter.split_text(text)
        ids = [f"{name}-{meta.get('page', 0)}-{i}" for i in range(len(pieces))]
        return ids, pieces, [{"source": name, **meta} for _ in pieces]

    def ingest_pdf(self, path: Path) -> tuple[int, int]:
        """(pages, chunks): every page's ``extract_text()``, split, embedded, added."""
        from pypdf import PdfReader

        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        reader = PdfReader(str(path))
        for number, page in enumerate(reader.pages, start=1):
            i, t, m = self.split(path.name, page.extract_text(), page=number)
            ids += i
            texts += t
            metas += m
        self.add(ids, texts, metas)
        return len(reader.pages), len(ids)

    def ingest_files(self, paths: Sequence[Path]) -> int:
        """Chunks added: each file read, split, then all embedded and added."""
        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        for path in paths:
            i, t, m = self.split(path.name, path.read_text(encoding="utf-8"))
            ids += i
            texts += t
            metas += m
        self.add(ids, texts, metas)
        return len(ids)

    def query(self, text: str, k: int = 10, include: Sequence[str] = ("metadatas", "distances")) -> Any:
        return self.collection.query(
            query_embeddings=self.embed([text]),
            n_results=k,
            include=list(include),  # type: ignore[arg-type]
        )


# -- the peer's timed runs, in a child process ----------------------------------------------
def _peer_child(task: dict[str, Any]) -> dict[str, Any]:
    """One timed run of the peer (``python -m bench.peers_rag --peer JSON``)."""
    lc = LangChainStyle(Path(task["chroma"]), "peer")
    if "hearthnet.services.rag.pdf_content" in sys.modules:
        raise RuntimeError("HearthNet's reader is loaded: the peer would parse PDFs with our tokenizer")
    if task["task"] == "pdf":
        t = time.perf_counter()
        pages, chunks = lc.ingest_pdf(Path(task["pdf"]))
        seconds = time.perf_counter() - t
        t = time.perf_counter()  # the bound: our chunks of the same pages, embedded alone
        lc.embed(json.loads(Path(task["our_chunks"]).read_text(encoding="utf-8")))
        return {
            "seconds": seconds,
            "pages": pages,
            "chunks": chunks,
            "embed_our_chunks": time.perf_counter() - t,
        }
    files = sorted(Path(task["dir"]).glob("*.txt"))
    if task["task"] == "texts":
        t = time.perf_counter()
        lc.embed([f.read_text(encoding="utf-8") for f in files])
        alone = time.perf_counter() - t
        ours_alone = None
        if task.get("our_chunks"):  # the bound: our chunker's chunks of the same texts, embedded alone
            ours = json.loads(Path(task["our_chunks"]).read_text(encoding="utf-8"))
            t = time.perf_counter()
            lc.embed(ours)
            ours_alone = time.perf_counter() - t
        t = time.perf_counter()
        chunks = lc.ingest_files(files)
        return {
            "seconds": time.perf_counter() - t,
            "embed_alone": alone,
            "embed_our_chunks": ours_alone,
            "chunks": chunks,
        }
    if task["task"] == "one":
        ms: list[float] = []
        for f in files:
            t = time.perf_counter()
            lc.ingest_files([f])
            ms.append((time.perf_counter() - t) * 1000)
        return {"ms": ms}
    raise ValueError(f"unknown peer task {task['task']!r}")


def run_peer(task: dict[str, Any]) -> dict[str, Any]:
    """The peer's run in a fresh child process (a user's script, pypdf as released)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.peers_rag", "--peer", json.dumps(task)],
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the peer pipeline failed: {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- data -----------------------------------------------------------------------------------
def small_texts() -> list[dict[str, str]]:
    """SciFact documents whose title + abstract has 200-300 words, in file order."""
    return [d for d in corpus() if SMALL_WORDS[0] <= len(doc_text(d).split()) <= SMALL_WORDS[1]]


def our_chunks(root: Path, dest: Path, max_tokens: int = 256) -> int:
    """Our chunker's chunk texts of every ``.txt`` under ``root`` (or of the file ``root``), as
    ``rag.ingest`` cuts them, written to ``dest`` as a JSON list; returns how many."""
    from hearthnet.services.rag.ingest.document import StreamedDocument

    texts: list[str] = []
    for f in [root] if root.is_file() else sorted(root.glob("*.txt")):
        doc = StreamedDocument(
            f.read_bytes(),
            doc_cid="blake3:" + "0" * 64,
            title="",
            language=None,
            max_tokens=max_tokens,
            filename_hint=f.name,
            extra_metadata={},
        )
        texts += [c.text for c in doc.read_all().chunks]
    dest.write_text(json.dumps(texts), encoding="utf-8")
    return len(texts)


def write_texts(docs: Sequence[dict[str, str]], root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for d in docs:
        (root / f"{d['_id']}.txt").write_text(doc_text(d), encoding="utf-8")
    return root


# -- the 10k-chunk collection of the peer ---------------------------------------------------
def peer_collection_10k(dest: Path) -> Path:
    """A chroma directory with the 10k vectors and metadata of ``bench.rag``'s c10k corpus.

    Built once into the cache (keyed by the vectors, chromadb's version and this layout),
    copied to ``dest`` for each run.
    """
    import chromadb

    from bench.rag import LANGS, dataset

    data = dataset(10_000)
    key = hashlib.blake2b(
        data.tobytes() + chromadb.__version__.encode() + b"peer-10k-v1", digest_size=6
    ).hexdigest()
    cached = CACHE / f"peer-chroma-{key}"
    if not (cached / "done").exists():
        building = cached.with_name(cached.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(cached, ignore_errors=True)
        lc = LangChainStyle(building, "peer")
        metas = [
            {"doc_cid": f"doc{i // 1000}", "page": 1, "chunk_index": i, "language": LANGS[i % 3]}
            for i in range(len(data))
        ]
        lc.add([f"v{i}" for i in range(len(data))], None, metas, vectors=data)
        lc.close()
        (building / "done").write_text("10000")
        building.rename(cached)
    shutil.copytree(cached, dest, ignore=shutil.ignore_patterns("done"))
    return dest


# -- ours -----------------------------------------------------------------------------------
async def _one_text_ours(home: Path, node_id: str, files: Sequence[Path]) -> list[float]:
    """ms per small text through a kept client connection: ``file.import`` then ``rag.ingest``."""
    from hearthnet.client import AsyncClient

    ms: list[float] = []
    async with AsyncClient(home) as client:
        for f in files:
            t = time.perf_counter()
            imported = await client.call("file.import", input={"path": str(f.resolve()), "pin": False})
            res = await client.call(
                "rag.ingest",
                params={"corpus": "one"},
                input={"doc_cid": imported.output["doc_cid"], "filename": f.name},
                provider=node_id,
                timeout=120,
            )
            ms.append((time.perf_counter() - t) * 1000)
            if int(res.output["chunks_indexed"]) < 1:
                raise RuntimeError(f"rag.ingest indexed nothing for {f.name}")
    return ms[1:]  # the first creates the corpus


class OurEngine:
    """The bound of a query of ours: the node's own model settings (one intra-op thread, no
    spinning) and an exact top-10 over the same 10k vectors, in process, no hop."""

    def __init__(self) -> None:
        from bench.rag import dataset
        from hearthnet.services.embedding.model_files import find_model_files
        from hearthnet.services.embedding.onnx_backend import OnnxModel, OnnxSettings

        self.model = OnnxModel(find_model_files(), OnnxSettings())
        self.vectors = dataset(10_000)

    def query(self, text: str) -> np.ndarray:
        v = self.model.run(self.model.tokenize([text]))[0]
        scores = self.vectors @ (v / np.linalg.norm(v))
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]


async def _queries(
    far_home: Path, far_id: str, peer: LangChainStyle, texts: Sequence[str], engine: OurEngine
) -> dict[str, list[float]]:
    """Per query, in turn: the peer in process, our engine in process (bound), then ``rag.query``
    through ``far``."""
    from hearthnet.client import AsyncClient

    out: dict[str, list[float]] = {"peer": [], "ours": [], "engine": []}
    async with AsyncClient(far_home) as client:

        async def ours(text: str) -> None:
            res = await client.call(
                "rag.query", params={"corpus": "c10k"}, input={"query": text, "k": 10, "include_text": False}
            )
            if res.provider == far_id or len(res.output["chunks"]) != 10:
                raise RuntimeError("rag.query was not answered by the RAG node with 10 chunks")

        for text in texts[:3]:  # warm both paths
            peer.query(text)
            await ours(text)
        for text in texts:
            t = time.perf_counter()
            got = peer.query(text)
            out["peer"].append((time.perf_counter() - t) * 1000)
            if len(got["ids"][0]) != 10:
                raise RuntimeError("the peer's query did not return 10 chunks")
            await anyio.sleep(SPIN_SECONDS)
            t = time.perf_counter()
            engine.query(text)
            out["engine"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await ours(text)
            out["ours"].append((time.perf_counter() - t) * 1000)
    return out


def _ingest_cli(node: Any, path: Path, corpus_name: str) -> tuple[float, int]:
    t = time.perf_counter()
    out = node.cli_json("ingest", str(path), "--corpus", corpus_name, timeout=7200)
    seconds = time.perf_counter() - t
    failed = [r for r in out["results"] if not r.get("ok")]
    if failed:
        raise RuntimeError(f"{len(failed)} files failed to ingest, first: {failed[0]}")
    return seconds, sum(int(r["chunks_indexed"]) for r in out["results"])


def run(quick: bool = False) -> list[PeerMetric]:
    node_like_process()
    from bench.rag import PDF, cached_store, first_pages
    from hearthnet.runtime.process_settings import event_loop_options
    from hearthnet.testing import LocalMesh, wait_for

    pdf_rounds, n_small, n_one, n_q, q_rounds = (1, 300, 21, 40, 3) if quick else (3, 1000, 51, 150, 5)
    store, _ = cached_store((10_000,))
    small = small_texts()
    if len(small) < n_small + n_one:
        raise RuntimeError(f"only {len(small)} SciFact texts of 200-300 words")
    queries = [t for _, t in test_queries()[0]][:n_q]
    with (
        tempfile.TemporaryDirectory(prefix="hn-peers-rag-") as tmp_s,
        LocalMesh(Path(tmp_s) / "mesh") as mesh,
    ):
        tmp = Path(tmp_s)
        pdf = first_pages(PDF, PDF_PAGES, tmp / f"geotopo_first{PDF_PAGES}.pdf")
        texts_dir = write_texts(small[:n_small], tmp / "small")
        one_dir = write_texts(small[n_small : n_small + n_one], tmp / "one")
        # A call of 32 full-window chunks can pass the default 10 s on a box loaded by other jobs;
        # the benchmark measures time, not that deadline (the peer has none).
        mesh.env.update({"HEARTHNET_LOG_LEVEL": "warning", "RAG_EMBED_TIMEOUT_SECONDS": str(EMBED_TIMEOUT)})
        node = mesh.add("rag")
        far = mesh.add("far", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        shutil.rmtree(node.home / "rag", ignore_errors=True)
        shutil.copytree(store, node.home / "rag", ignore=shutil.ignore_patterns("done"))
        mesh.found(node)
        mesh.invite(node, far, "member")
        mesh.wait_full_mesh([node, far])

        # 1. the PDF
        _ingest_cli(node, pdf, "warm-up")
        pdf_ours: list[float] = []
        pdf_peer: list[float] = []
        chunks = {"ours": 0, "peer": 0}
        pdf_bound: list[float] = []
        our_chunks(pdf, tmp / "our-pdf-chunks.json")
        for r in range(pdf_rounds):
            task = {"task": "pdf", "pdf": str(pdf), "chroma": str(tmp / f"peer-pdf{r}")}
            peer = run_peer({**task, "our_chunks": str(tmp / "our-pdf-chunks.json")})
            pdf_peer.append(peer["seconds"])
            pdf_bound.append(peer["embed_our_chunks"])
            chunks["peer"] = peer["chunks"]
            seconds, chunks["ours"] = _ingest_cli(node, pdf, f"pdf{r}")
            pdf_ours.append(seconds)

        # 2. the small texts (and the bound: our chunks of them, embedded alone)
        n_ours = our_chunks(texts_dir, tmp / "our-chunks.json")
        peer = run_peer(
            {
                "task": "texts",
                "dir": str(texts_dir),
                "chroma": str(tmp / "peer-small"),
                "our_chunks": str(tmp / "our-chunks.json"),
            }
        )
        small_s, small_chunks = _ingest_cli(node, texts_dir, "small")

        # 3. one small text at a time
        one_peer = run_peer({"task": "one", "dir": str(one_dir), "chroma": str(tmp / "peer-one")})["ms"][1:]
        one_ours = anyio.run(
            _one_text_ours,
            node.home,
            node.node_id,
            sorted(one_dir.glob("*.txt")),
            backend_options=event_loop_options(),
        )

        # 4. queries at 10k chunks
        wait_for(
            lambda: any(
                c["capability"].startswith("rag.query@") and c["params"].get("corpus") == "c10k"
                for c in far.status()["capabilities"]
            ),
            timeout=60,
            what="far to see the c10k corpus",
        )
        lc = LangChainStyle(peer_collection_10k(tmp / "peer-10k"), "peer", create=False)
        q: dict[str, list[float]] = {"peer": [], "ours": [], "engine": [], "peer95": [], "ours95": []}
        engine = OurEngine()
        for _ in range(q_rounds):
            got = anyio.run(
                _queries, far.home, far.node_id, lc, queries, engine, backend_options=event_loop_options()
            )
            q["engine"].append(percentile(got["engine"], 0.5))
            for who in ("peer", "ours"):
                q[who].append(percentile(got[who], 0.5))
                q[who + "95"].append(percentile(got[who], 0.95))
        lc.close()

    po, pp = median_range(pdf_ours), median_range(pdf_peer)
    pb = median_range(pdf_bound)[0]
    one_o, one_p = percentile(one_ours, 0.5), percentile(one_peer, 0.5)
    qo, qp = median_range(q["ours"]), median_range(q["peer"])
    qo95, qp95 = median_range(q["ours95"]), median_range(q["peer95"])
    qe = median_range(q["engine"])
    lc_name = "LangChain-style"
    bound_x = peer["embed_our_chunks"] / peer["embed_alone"]
    return [
        PeerMetric(
            "rag",
            f"ingest of the {PDF_PAGES}-page PDF: hearthnet ingest (CLI) vs the LangChain-style pipeline",
            "s",
            round(po[0], 2),
            round(pp[0], 2),
            lc_name,
            "<= 0.7x LangChain-style",
            po[0] <= 0.7 * pp[0],
            round(po[1], 2),
            round(po[2], 2),
            round(pp[1], 2),
            round(pp[2], 2),
            note=f"first {PDF_PAGES} pages of {PDF.name}; "
            f"chunks: ours {chunks['ours']}, peer {chunks['peer']}; bound, same run: our chunks embedded "
            f"alone by the peer's direct model {pb:.2f} s = {pb / pp[0]:.2f}x the peer",
        ),
        PeerMetric(
            "rag",
            f"ingest of {n_small} small texts (200-300 words): hearthnet ingest DIR vs embedding them alone",
            "s",
            round(small_s, 1),
            round(peer["embed_alone"], 1),
            "embedding alone",
            "<= 1.3x embedding alone",
            small_s <= 1.3 * peer["embed_alone"],
            note=f"base: one vector per text, same model called directly in batches of {BATCH}; "
            f"ours made {small_chunks} chunks; bound, same run: embedding our {n_ours} chunks alone "
            f"{peer['embed_our_chunks']:.1f} s = {bound_x:.2f}x the base",
        ),
        PeerMetric(
            "rag",
            f"ingest of {n_small} small texts (200-300 words): hearthnet ingest DIR vs embedding "
            "our chunks of them alone (bound)",
            "s",
            round(small_s, 1),
            round(peer["embed_our_chunks"], 1),
            "our chunks embedded alone",
            "(bound)",
            None,
            note=f"the same {n_ours} chunks our chunker cuts, same direct model, batches of {BATCH}: "
            "what is left of ours beyond it is the pipeline (read, import, write, events)",
        ),
        PeerMetric(
            "rag",
            f"ingest of {n_small} small texts (200-300 words): hearthnet ingest DIR vs LangChain-style",
            "s",
            round(small_s, 1),
            round(peer["seconds"], 1),
            lc_name,
            "(reported)",
            None,
            note=f"chunks: ours {small_chunks}, peer {peer['chunks']}",
        ),
        PeerMetric(
            "rag",
            "ingest of one small text through the client (file.import + rag.ingest), p50",
            "ms",
            round(one_o, 1),
            round(one_p, 1),
            lc_name,
            "<= 100 ms",
            one_o <= 100,
            round(min(one_ours), 1),
            round(max(one_ours), 1),
            round(min(one_peer), 1),
            round(max(one_peer), 1),
            note=f"{len(one_ours)} texts, each new; peer: read, split, embed, add",
        ),
        PeerMetric(
            "rag",
            "rag.query p50 at 10k chunks from another node vs in-process embed + chroma query",
            "ms",
            round(qo[0], 2),
            round(qp[0], 2),
            lc_name,
            "<= 1.0x LangChain-style",
            qo[0] <= qp[0],
            round(qo[1], 2),
            round(qo[2], 2),
            round(qp[1], 2),
            round(qp[2], 2),
            note=f"{len(queries)} SciFact claims x {q_rounds} rounds, k = 10, no text returned; bound, same "
            f"queries in turn: our engine in process (the node's model settings, exact top-10, no hop) "
            f"p50 {qe[0]:.2f} ms = {qe[0] / qp[0]:.2f}x the peer",
        ),
        PeerMetric(
            "rag",
            "rag.query p95 at 10k chunks from another node vs in-process embed + chroma query",
            "ms",
            round(qo95[0], 2),
            round(qp95[0], 2),
            lc_name,
            "(reported)",
            None,
            round(qo95[1], 2),
            round(qo95[2], 2),
            round(qp95[1], 2),
            round(qp95[2], 2),
        ),
    ]


# -- SciFact (called by bench.scifact) ------------------------------------------------------
def langchain_scifact(
    docs: Sequence[dict[str, str]],
    queries: Sequence[tuple[str, str]],
    qrels: dict[str, set[str]],
    root: Path,
) -> tuple[float, int]:
    """nDCG@10 and chunk count of the peer on ``docs``: each split, embedded, added; k = 20 chunks
    per query, deduplicated to the first 10 documents, as ``bench.scifact`` scores ours."""
    lc = LangChainStyle(root, "scifact")
    ids: list[str] = []
    texts: list[str] = []
    metas: list[dict[str, Any]] = []
    for d in docs:
        pieces = lc.splitter.split_text(doc_text(d))
        ids += [f"{d['_id']}-{i}" for i in range(len(pieces))]
        texts += pieces
        metas += [{"doc_id": d["_id"]} for _ in pieces]
    lc.add(ids, texts, metas)
    found = lc.collection.query(
        query_embeddings=lc.embed([t for _, t in queries]), n_results=20, include=["metadatas"]
    )
    scores: list[float] = []
    for (qid, _), rows in zip(queries, found["metadatas"] or [], strict=True):
        ranked: list[str] = []
        for meta in rows:
            doc = str(meta["doc_id"])
            if doc not in ranked:
                ranked.append(doc)
        scores.append(ndcg_at_10(ranked[:10], qrels[qid]))
    lc.close()
    return float(np.mean(scores)), len(ids)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        print(json.dumps(_peer_child(json.loads(args.peer))))
        return
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
