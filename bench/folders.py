"""Watched folders (issue 35): the first scan of a folder of 1,000 mixed small files against
``hearthnet ingest DIR`` of the same files, in the same run on the same node; the delay from a
one-page document saved into the watched folder to it being answerable; and questions to
another corpus while a second folder (a quarter as many files) is scanned, against the same
questions idle.

One node (founder: embeds, hosts).  The files are SciFact abstracts (``../shared/data``), as
plain text and Markdown in nested folders; the watched copy differs from the ingested one by one
line per file, so neither run finds the other's documents already stored.  Each run's files/s is
the files over the wall time from the command to the last document indexed (for the watcher:
``watch add`` until ``watch list`` says every file is indexed).  The delay is timed from the
file's write to the first ``rag.query`` that returns it (asked every 50 ms).

    python -m bench.folders [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import PeerMetric, median_range, node_like_process, percentile
from bench.scifact import corpus, doc_text
from hearthnet.client import AsyncClient
from hearthnet.testing import LocalMesh, MeshNode

ISSUE = "35"
QUESTIONS = ("what lowers blood pressure", "how do vaccines work", "which genes are linked to cancer")
LATENCY_ROUNDS = 5
PAGE = 2800
"""Characters of a one-page document (about 450 words)."""


def write_folder(root: Path, docs: list[dict[str, str]], tag: str) -> None:
    """The documents as files in ten folders, text and Markdown in turn, each ending with ``tag``."""
    for i, doc in enumerate(docs):
        sub = root / f"part-{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        if i % 2:
            (sub / f"{doc['_id']}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n\n{tag}\n")
        else:
            (sub / f"{doc['_id']}.txt").write_text(f"{doc_text(doc)}\n{tag}\n")


async def _watch_list(home: Path) -> list[dict[str, Any]]:
    async with AsyncClient(home) as client:
        result = await client.call("rag.watch", input={"action": "list"}, timeout=30)
        return list(result.output["folders"])


def wait_indexed(node: MeshNode, corpus_name: str, files: int, limit: float) -> float:
    """``time.monotonic()`` once the folder watched into ``corpus_name`` has every file indexed
    (asked every 200 ms)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        (entry,) = [f for f in anyio.run(_watch_list, node.home) if f["corpus"] == corpus_name]
        if entry["indexed"] >= files and not entry["pending"]:
            return time.monotonic()
        if entry.get("failed_count"):
            raise RuntimeError(f"{entry['failed_count']} files failed: {entry['failed'][:3]}")
        time.sleep(0.2)
    raise RuntimeError(f"the first scan did not finish within {limit:.0f} s")


async def _ask(home: Path, corpus_name: str, until: threading.Event | None, n: int) -> list[float]:
    """Questions one at a time (``n``, or until ``until`` is set); latencies in ms."""
    out: list[float] = []
    async with AsyncClient(home) as client:
        i = 0
        while (until is None and i < n) or (until is not None and not until.is_set()):
            t = time.perf_counter()
            await client.call(
                "rag.query", {"corpus": corpus_name}, {"query": QUESTIONS[i % 3], "k": 5}, timeout=60
            )
            out.append((time.perf_counter() - t) * 1000)
            i += 1
    return out


async def _answerable(home: Path, corpus_name: str, filename: str, limit: float) -> float:
    """``time.monotonic()`` when a query filtered to ``filename`` first returns a chunk."""
    with anyio.fail_after(limit):
        async with AsyncClient(home) as client:
            while True:
                got = await client.call(
                    "rag.query",
                    {"corpus": corpus_name},
                    {"query": "a saved page", "k": 1, "filter": {"doc_filename": filename}},
                    timeout=30,
                )
                if got.output["chunks"]:
                    return time.monotonic()
                await anyio.sleep(0.05)


def measure(quick: bool) -> dict[str, Any]:
    n = 200 if quick else 1000
    docs = corpus()
    scan_docs, page_docs = docs[:n], docs[n : n + LATENCY_ROUNDS * 3]
    out: dict[str, Any] = {"files": n}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_folder(root / "ingested", scan_docs, "(copied by hand)")
        write_folder(root / "watched", scan_docs, "(kept in a watched folder)")
        write_folder(root / "other", docs[n + 100 : n + 400], "")
        busy_docs = docs[n + 400 : n + 400 + n // 4]
        write_folder(root / "busy", busy_docs, "")
        mesh = LocalMesh(root / "mesh")
        mesh.env["RAG_EMBED_TIMEOUT_SECONDS"] = "300"
        try:
            a = mesh.add("a")
            mesh.found(a)
            a.cli_json("ingest", str(root / "other"), "--corpus", "other", timeout=3600)
            out["idle_ms"] = anyio.run(_ask, a.home, "other", None, 30)
            t = time.monotonic()
            a.cli_json("ingest", str(root / "ingested"), "--corpus", "byhand", timeout=7200)
            out["ingest_s"] = time.monotonic() - t
            t = time.monotonic()
            a.cli_json("watch", "add", str(root / "watched"), "--corpus", "watched")
            out["watch_s"] = wait_indexed(a, "watched", n, 7200) - t
            out["delay_s"] = _delays(a, root / "watched", page_docs)
            a.cli_json("watch", "add", str(root / "busy"), "--corpus", "busy")
            done = threading.Event()
            during: dict[str, list[float]] = {}
            asker = threading.Thread(
                target=lambda: during.update(ms=anyio.run(_ask, a.home, "other", done, 0))
            )
            asker.start()
            try:
                wait_indexed(a, "busy", len(busy_docs), 7200)
            finally:
                done.set()
                asker.join()
            out["during_ms"] = during.get("ms", [])
        finally:
            mesh.close()
    return out


def _delays(node: MeshNode, folder: Path, docs: list[dict[str, str]]) -> list[float]:
    """Seconds from a one-page file written into the watched folder to a query returning it."""
    delays = []
    text = " ".join(doc_text(d) for d in docs)
    for i in range(LATENCY_ROUNDS):
        name = f"saved-{i}.txt"
        page = text[i * PAGE : (i + 1) * PAGE]
        t = time.monotonic()
        (folder / name).write_text(page)
        delays.append(anyio.run(_answerable, node.home, "watched", name, 120.0) - t)
    return delays


def run(quick: bool = False) -> list[PeerMetric]:
    node_like_process()
    got = measure(quick)
    n = got["files"]
    watch_fps, ingest_fps = n / got["watch_s"], n / got["ingest_s"]
    idle, during = statistics.median(got["idle_ms"]), got["during_ms"]
    delay, d_lo, d_hi = median_range(got["delay_s"])
    rows = [
        PeerMetric(
            ISSUE,
            f"folders: first scan of {n} small text/Markdown files",
            "files/s",
            round(watch_fps, 1),
            round(ingest_fps, 1),
            f"hearthnet ingest DIR, same files ({got['ingest_s']:.0f} s)",
            ">= 0.8x",
            watch_fps >= 0.8 * ingest_fps,
            note=f"watch add to every file indexed: {got['watch_s']:.0f} s",
        ),
        PeerMetric(
            ISSUE,
            f"folders: rag.query p50 to another corpus during a first scan ({n // 4} files)",
            "ms",
            round(statistics.median(during), 1) if during else None,
            round(idle, 1),
            "the same questions idle",
            "<= 3x",
            bool(during) and statistics.median(during) <= 3 * idle,
            note=f"{len(during)} questions during the scan, p95 {percentile(during, 0.95):.0f} ms"
            if during
            else "no question finished during the scan",
        ),
        PeerMetric(
            ISSUE,
            "folders: a one-page text saved until answerable",
            "s",
            round(delay, 2),
            None,
            "",
            "<= 5 s",
            delay <= 5.0,
            ours_min=round(d_lo, 2),
            ours_max=round(d_hi, 2),
            note=f"{len(got['delay_s'])} rounds; settle window 1 s",
        ),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps([m.to_json() for m in run(args.quick)], indent=2))


if __name__ == "__main__":
    main()
