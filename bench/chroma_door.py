"""The ChromaDB door: ``collection.query`` through a node vs the same query straight to a ChromaDB
server holding the same vectors, same run.

Ours: one node (MiniLM, RAG, its HTTP port) with a shared PDF ingested; the official
``chromadb.HttpClient`` with token auth asks the node's ``/api/v2`` (the door checks the key,
asks ``rag.query`` with the vector over the bus, shapes Chroma's answer).  Peer: ``chroma run``
(ChromaDB's own server, from the same ``chromadb`` package) on loopback, with every chunk, vector
and metadata copied out of the node through the door's ``get`` — what a user runs today.  The
queries are the vectors of questions embedded once; rounds alternate between the two so that
machine noise hits both.  Target: ours p50 <= 1.5x the server's.  Agreement of the top-10 ids
is reported (our small corpus is searched exactly, ChromaDB's through HNSW).

    python -m bench.chroma_door [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import SHARED_DATA, PeerMetric, machine, percentile

PDF = SHARED_DATA / "pdfs" / "en_irs_i1040nr_instructions.pdf"
CORPUS = "taxes"
MINILM = "all-MiniLM-L6-v2"
QUESTIONS = (
    "Who must file Form 1040-NR?",
    "When is the return due?",
    "How do I report effectively connected income?",
    "What is a dual-status taxpayer?",
    "Where do I mail my return?",
    "How is the tax on capital gains figured?",
    "Can I claim the standard deduction?",
    "What is the treaty exemption for students?",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(host: str, port: int, key: str | None) -> Any:
    import chromadb
    from chromadb.config import Settings

    extra: dict[str, Any] = {}
    if key is not None:
        extra = {
            "chroma_client_auth_provider": "chromadb.auth.token_authn.TokenAuthClientProvider",
            "chroma_client_auth_credentials": key,
        }
    return chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False, **extra))


def _wait_heartbeat(host: str, port: int, deadline: float) -> None:
    import httpx

    while True:
        try:
            if httpx.get(f"http://{host}:{port}/api/v2/heartbeat", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("chroma run did not start")
        time.sleep(0.2)


def run(quick: bool) -> list[PeerMetric]:
    from hearthnet.client import Client, plain_output
    from hearthnet.testing import LocalMesh, wait_for

    rounds = 60 if quick else 300
    root = Path(tempfile.mkdtemp(prefix="bench-chroma-door-"))
    server: subprocess.Popen[bytes] | None = None
    try:
        with LocalMesh(root) as mesh:
            node = mesh.add("a", env={"HEARTHNET_UI_LISTEN": "127.0.0.1:0"})
            config = node.home / "config.toml"  # the key's rate must not be what is measured
            config.write_text(
                config.read_text().replace(
                    "[ui]\n", "[ui]\napi_requests_per_minute = 100000\napi_burst = 10000\n", 1
                )
            )
            mesh.found(node)
            node.cli_json("ingest", str(PDF), "--corpus", CORPUS, timeout=900)
            wait_for(lambda: (node.home / "ui.json").exists(), timeout=60, what="the UI")
            url = json.loads((node.home / "ui.json").read_text())["url"]
            host, port = url.split("//", 1)[1].rsplit(":", 1)
            link = node.cli_json("ui", "token", "create", "--name", "bench", "--level", "member")["link"]
            key = link.split("#", 1)[1]
            ours = _client(host, int(port), key).get_collection(CORPUS)
            everything = ours.get(include=["embeddings", "metadatas", "documents"])
            with Client(node.home) as c:
                out = c.call("embed.text", params={"model": MINILM}, input={"texts": list(QUESTIONS)}).output
            vectors = [list(map(float, v)) for v in plain_output(out)["embeddings"]]

            peer_port = _free_port()
            chroma = shutil.which("chroma") or str(Path(sys.executable).with_name("chroma"))
            server = subprocess.Popen(
                [
                    chroma,
                    "run",
                    "--path",
                    str(root / "chroma"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(peer_port),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _wait_heartbeat("127.0.0.1", peer_port, time.monotonic() + 60)
            peer = _client("127.0.0.1", peer_port, None).create_collection(
                CORPUS, metadata={"hnsw:space": "cosine"}, embedding_function=None
            )
            peer.add(
                ids=everything["ids"],
                embeddings=everything["embeddings"],
                metadatas=everything["metadatas"],
                documents=everything["documents"],
            )
            agree = []
            for v in vectors:
                a = ours.query(query_embeddings=[v], n_results=10)["ids"][0]
                b = peer.query(query_embeddings=[v], n_results=10)["ids"][0]
                agree.append(len(set(a) & set(b)) / 10)
            times: dict[str, list[float]] = {"ours": [], "peer": []}
            for i in range(rounds):
                v = vectors[i % len(vectors)]
                for name, col in (
                    (("ours", ours), ("peer", peer)) if i % 2 == 0 else (("peer", peer), ("ours", ours))
                ):
                    t0 = time.perf_counter()
                    col.query(
                        query_embeddings=[v], n_results=10, include=["documents", "metadatas", "distances"]
                    )
                    times[name].append((time.perf_counter() - t0) * 1000)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)
    p50_ours, p50_peer = percentile(times["ours"], 0.5), percentile(times["peer"], 0.5)
    note = (
        f"{len(everything['ids'])} chunks of {PDF.name}, k=10, {rounds} rounds each, alternating; "
        f"top-10 agreement {sum(agree) / len(agree):.2f}; load {machine()['load_avg_1m']}"
    )
    return [
        PeerMetric(
            issue="open-doors",
            name="Chroma query p50 through the node's ChromaDB door vs chroma run with the same vectors",
            unit="ms",
            ours=round(p50_ours, 2),
            peer=round(p50_peer, 2),
            peer_name="chroma run (ChromaDB server)",
            target="<= 1.5x",
            passed=p50_ours <= 1.5 * p50_peer,
            ours_min=round(min(times["ours"]), 2),
            ours_max=round(max(times["ours"]), 2),
            peer_min=round(min(times["peer"]), 2),
            peer_max=round(max(times["peer"]), 2),
            note=note,
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for metric in run(args.quick):
        print(json.dumps(metric.to_json()))


if __name__ == "__main__":
    main()
