"""Passages that answer (issue 34 item 3): is the first passage ``rag.query`` ranks from the page
that answers?  hit@1 (and hit@5, and how often a chunk of a page with almost no text comes first
for a question it does not answer) over a question set of its own (:data:`QUESTIONS`, each with the
page a person read the answer on) on the first pages of three shared PDFs: Walden (one column,
title, notice and contents pages first), the IRS 1040-NR instructions (three columns, interleaved
by pypdf) and a 3-column Federal Register issue.

Measured twice in the same run, on the same store code and model: **before** (pages as pypdf
orders them, every chunk ranked by its score) and **after** (pages with columns read column by
column, :mod:`hearthnet.services.rag.ingest.columns`; chunks of pages with almost no text demoted,
:mod:`hearthnet.services.rag.low_text`), in the ``dense`` and ``hybrid`` modes, through a real
:class:`CorpusStore` and the all-MiniLM-L6-v2 model (int8 ONNX; embeddings cached on disk).

    python -m bench.passages
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from bench.common import SHARED_DATA
from bench.rag import first_pages
from bench.rag_recall import CACHE_DIR, OnnxMiniLM
from hearthnet.services.rag.ingest.chunk import chunk_document
from hearthnet.services.rag.ingest.columns import ColumnOrder
from hearthnet.services.rag.ingest.read import read_document
from hearthnet.services.rag.low_text import LOW_TEXT, demoted, wider
from hearthnet.services.rag.store import CorpusStore

PDFS = SHARED_DATA / "pdfs"
CORPORA = {
    "walden": ("en_walden_thoreau_249p.pdf", 75),
    "irs": ("en_irs_i1040nr_instructions.pdf", 12),
    "faa": ("en_federal_register_3col.pdf", 6),
}
"""Corpus -> (shared PDF, pages ingested from its start)."""

QUESTIONS: list[tuple[str, str, tuple[int, ...]]] = [
    ("When did Thoreau go to live in the woods?", "walden", (65,)),
    ("Why did the author go to the woods?", "walden", (70,)),
    ("What kind of lives does the mass of men lead?", "walden", (8,)),
    ("Whose shanty did the author buy for its boards?", "walden", (34,)),
    ("How much did the author's house cost in all?", "walden", (38,)),
    ("When did the author borrow an axe and go down to the woods by Walden Pond?", "walden", (32,)),
    ("Which farm did the author nearly buy before the owner's wife changed her mind?", "walden", (63, 64)),
    ("How far from the village of Concord was the pond the author lived by?", "walden", (66,)),
    ("Where did Thoreau live, and what did he live for?", "walden", (63,)),
    ("Who wrote Walden and in what year was it published?", "walden", (2,)),
    ("Who created and published this edition of Walden?", "walden", (3,)),
    ("Where was the author's house, and who built it?", "walden", (5,)),
    ("What must I do with my tax return before I file it?", "irs", (4,)),
    ("Which form do I file to get an automatic extension of time to file?", "irs", (4,)),
    ("What is the penalty for not filing Form 8854?", "irs", (7,)),
    ("How long does it usually take to get an ITIN?", "irs", (8,)),
    ("What is the deduction rate for domestic production activities for 2007?", "irs", (1,)),
    ("Who must attach Form 8843 to exclude days of presence?", "irs", (2,)),
    ("To which address in Texas do I mail Form 1040NR?", "irs", (4, 5)),
    ("How many people died in the Lion Air Flight 610 accident?", "faa", (2,)),
    ("How many fatalities did the Ethiopian Airlines Flight 302 accident cause?", "faa", (2,)),
    ("When did the FAA issue Emergency AD 2018-23-51?", "faa", (2,)),
    ("How is the angle of attack measured on the current 737 MAX?", "faa", (2,)),
    ("Which flight control computer software would the proposed AD require installing?", "faa", (5,)),
    ("What are the estimated costs to comply with the proposed AD?", "faa", (5,)),
]
"""(question, corpus, pages that answer it)."""
K = 5


class Embeddings:
    """all-MiniLM-L6-v2 vectors of texts, cached on disk by the text's hash."""

    def __init__(self) -> None:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = CACHE_DIR / "passages-minilm.pkl"
        self.known: dict[str, np.ndarray] = pickle.loads(self.path.read_bytes()) if self.path.exists() else {}
        self.model: OnnxMiniLM | None = None

    def __call__(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.blake2b(t.encode(), digest_size=16).hexdigest() for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self.known}.items())
        if todo:
            self.model = self.model or OnnxMiniLM()
            for (key, _), vec in zip(todo, self.model.embed([t for _, t in todo]), strict=True):
                self.known[key] = vec
            self.path.write_bytes(pickle.dumps(self.known))
        return np.stack([self.known[k] for k in keys])


@contextmanager
def pypdf_order() -> Iterator[None]:
    """Pages as pypdf orders them (the reading before columns were read column by column)."""
    with mock.patch.object(ColumnOrder, "text", return_value=None):
        yield


def build(root: Path, embed: Embeddings, *, columns: bool) -> CorpusStore:
    store = CorpusStore(root)
    for corpus, (name, pages) in CORPORA.items():
        src = first_pages(PDFS / name, pages, root.parent / f"{corpus}-{pages}.pdf")
        if columns:
            doc = read_document(src.read_bytes())
        else:
            with pypdf_order():
                doc = read_document(src.read_bytes())
        chunks = chunk_document(
            doc, doc_cid=f"blake3:{corpus}", doc_title=name, language="en", max_tokens=256
        )
        store.create_corpus(corpus, embedding_model="all-MiniLM-L6-v2", dim=384)
        store.add_document(corpus, chunks, embed([c.text for c in chunks]))
    return store


def ranked(
    store: CorpusStore, embed: Embeddings, question: str, corpus: str, mode: str, after: bool
) -> list[Any]:
    vec = embed([question])[0]
    k = wider(K) if after else K
    if mode == "dense":
        hits = store.query(corpus, vec, k=k)
    else:
        hits = store.query_words(corpus, vec, question, k=k, mode="hybrid")
    return demoted(hits, K) if after else list(hits)[:K]


def measure(store: CorpusStore, embed: Embeddings, mode: str, after: bool) -> dict[str, Any]:
    at1 = at5 = low_first = 0
    misses = []
    for question, corpus, pages in QUESTIONS:
        hits = ranked(store, embed, question, corpus, mode, after)
        got = [int(h.metadata["page"]) for h in hits]
        at1 += bool(got) and got[0] in pages
        at5 += any(p in pages for p in got)
        low_first += bool(hits) and hits[0].metadata.get(LOW_TEXT) is True and not set(got[:1]) & set(pages)
        if not got or got[0] not in pages:
            first = hits[0].metadata if hits else {}
            misses.append(
                {"q": question, "want": pages, "got": got[:3], "low_text": bool(first.get(LOW_TEXT))}
            )
    n = len(QUESTIONS)
    return {
        "hit@1": round(at1 / n, 3),
        "hit@5": round(at5 / n, 3),
        "low_text_first": low_first,
        "questions": n,
        "misses": misses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="list the questions missed")
    args = parser.parse_args()
    embed = Embeddings()
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, columns in (("before", False), ("after", True)):
            store = build(Path(tmp) / label / "rag", embed, columns=columns)
            try:
                for mode in ("dense", "hybrid"):
                    got = measure(store, embed, mode, after=columns)
                    if not args.verbose:
                        got.pop("misses")
                    report[f"{label}_{mode}"] = got
            finally:
                store.close()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
