"""``answer.ask`` against calling the same OpenAI-compatible server with a hand-built prompt.

Ours: a node with embedder, RAG and one chat model (``HEARTHNET_LLM_*``) holds a
corpus of SciFact documents (``hearthnet ingest DIR``); this process asks
``answer.ask`` (``{question, corpora}``, streamed) through the node's control
socket on a kept connection.  Time to first token = the first non-empty
``{delta}`` frame; total = the final answer.

Peer, the same minutes: what a user writes instead, in this process.  The
LangChain-style pipeline of ``bench.peers_rag`` (the same documents split
1,000 / 200 characters, embedded with the same model, chromadb) retrieves as
many chunks as ``answer.ask`` put in its prompt (``meta.chunks``), a prompt is
built by hand (a system message with the chunks, the question as the user
message) and ``POST /v1/chat/completions`` with ``stream: true`` goes to the
same server through one kept ``httpx`` connection; first token = the first
non-empty ``delta.content`` of the event stream, total = ``[DONE]``.  The two
take turns question by question.

The server: ``HEARTHNET_BENCH_LLM_URL`` and ``HEARTHNET_BENCH_LLM_MODEL`` when
set (a real server such as llama.cpp or Ollama), otherwise the deterministic
loopback server of the tests (``tests/openai_chat_server.py``, a separate
process), which answers at once: the figures are then the overhead of each
path around the model, not the model's speed.  Without ``answer.ask`` on this
tree (or without a server) the benchmark reports "not measured" and why.

    python -m bench.peers_answer [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench.common import PeerMetric, helper_servers, machine, median_range, node_like_process, percentile
from bench.peers_rag import SPIN_SECONDS, LangChainStyle
from bench.scifact import corpus, doc_text, test_queries

TEST_SERVER = "tests.openai_chat_server"
MODEL = "bench-chat"
CORPUS = "answers"
MAX_TOKENS = 256
SYSTEM = (
    "Answer the question using only the context below. Cite each fact as [file#chunk_id]. "
    "If the context does not hold the answer, say so.\n\nContext:\n"
)

LLM_SERVER = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
from tests.openai_chat_server import OpenAIChatServer
server = OpenAIChatServer((sys.argv[2],))
print(server.port, flush=True)
threading.Event().wait()
"""
"""The tests' OpenAI-compatible server in a process of its own, until the benchmark kills it."""


def not_measured(why: str) -> list[PeerMetric]:
    return [
        PeerMetric(
            "answer",
            f"answer.ask {what} vs a hand-built prompt to the same server, p50",
            "ms",
            None,
            None,
            "hand-built prompt",
            "(reported)",
            None,
            note=f"not measured: {why}",
        )
        for what in ("time to first token", "total time")
    ]


async def _ask_ours(client: Any, question: str) -> tuple[float, float, dict[str, Any]]:
    """(ttft ms, total ms, output) of one ``answer.ask``."""
    t = time.perf_counter()
    first: float | None = None
    async with client.stream("answer.ask", input={"question": question, "corpora": [CORPUS]}) as call:
        async for frame in call.frames():
            if first is None and frame.get("delta"):
                first = time.perf_counter()
        res = await call.result()
    end = time.perf_counter()
    meta = {**res.meta, **(res.output.get("meta") or {})}
    return ((first or end) - t) * 1000, (end - t) * 1000, {**res.output, "meta": meta}


async def _ask_peer(
    http: Any, url: str, model: str, lc: LangChainStyle, question: str, k: int
) -> tuple[float, float]:
    """(ttft ms, total ms): retrieve k chunks, build the prompt, stream the server's answer."""
    t = time.perf_counter()
    found = lc.query(question, k=k, include=("documents", "metadatas"))
    lines = [
        f'- From {meta["source"]}#{cid}: "{" ".join(text.split())}"'
        for cid, text, meta in zip(found["ids"][0], found["documents"][0], found["metadatas"][0], strict=True)
    ]
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM + "\n".join(lines)},
            {"role": "user", "content": question},
        ],
        "stream": True,
        "max_tokens": MAX_TOKENS,
    }
    first: float | None = None
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            choices = json.loads(data).get("choices") or [{}]
            if first is None and (choices[0].get("delta") or {}).get("content"):
                first = time.perf_counter()
    end = time.perf_counter()
    return ((first or end) - t) * 1000, (end - t) * 1000


@dataclass
class Asked:
    """Per question, in turn: ours and the peer (ms), the answer's mode and the chunks it used."""

    ours_ttft: list[float] = field(default_factory=list)
    ours_total: list[float] = field(default_factory=list)
    peer_ttft: list[float] = field(default_factory=list)
    peer_total: list[float] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    k: list[int] = field(default_factory=list)


async def _measure(home: Path, url: str, model: str, lc: LangChainStyle, questions: list[str]) -> Asked:
    import httpx

    from hearthnet.client import AsyncClient
    from hearthnet.errors import BusError

    out = Asked()
    async with AsyncClient(home) as client, httpx.AsyncClient(timeout=120) as http:
        try:
            await _ask_ours(client, questions[0])  # warm-up, and is answer.ask there?
        except BusError as exc:
            if exc.code == "not_found":
                raise AnswerUnavailable(exc.message) from None
            raise
        await _ask_peer(http, url, model, lc, questions[0], 10)
        for question in questions[1:]:
            ttft, total, output = await _ask_ours(client, question)
            out.ours_ttft.append(ttft)
            out.ours_total.append(total)
            out.modes.append(str(output.get("mode")))
            chunks = output["meta"].get("chunks")
            k = chunks if isinstance(chunks, int) and chunks > 0 else 10
            out.k.append(k)
            ttft, total = await _ask_peer(http, url, model, lc, question, k)
            out.peer_ttft.append(ttft)
            out.peer_total.append(total)
            await anyio.sleep(SPIN_SECONDS)
    return out


class AnswerUnavailable(Exception):
    """The node has no ``answer.ask``."""


def _documents(n_questions: int, n_others: int) -> tuple[list[dict[str, str]], list[str]]:
    """SciFact test claims and a corpus holding their relevant documents plus others."""
    queries, qrels = test_queries()
    rng = random.Random(5)
    asked = rng.sample(queries, n_questions)
    wanted = {d for qid, _ in asked for d in qrels[qid]}
    docs = corpus()
    chosen = [d for d in docs if d["_id"] in wanted]
    chosen += rng.sample([d for d in docs if d["_id"] not in wanted], n_others)
    return chosen, [text for _, text in asked]


def run(quick: bool = False) -> list[PeerMetric]:
    node_like_process()
    if importlib.util.find_spec("hearthnet.answer") is None:
        return not_measured("answer.ask not available (no hearthnet.answer on this tree)")
    url, model = os.environ.get("HEARTHNET_BENCH_LLM_URL"), os.environ.get("HEARTHNET_BENCH_LLM_MODEL")
    if url and not model:
        raise RuntimeError("HEARTHNET_BENCH_LLM_URL is set: set HEARTHNET_BENCH_LLM_MODEL too")
    spec = None if url else importlib.util.find_spec(TEST_SERVER)
    if not url and (spec is None or spec.origin is None):
        return not_measured(
            "no OpenAI-compatible server: tests/openai_chat_server.py is not importable and "
            "HEARTHNET_BENCH_LLM_URL is not set"
        )
    from hearthnet.runtime.process_settings import event_loop_options
    from hearthnet.testing import LocalMesh

    n_questions, n_others = (21, 100) if quick else (51, 300)
    docs, questions = _documents(n_questions, n_others)
    with (
        tempfile.TemporaryDirectory(prefix="hn-peers-answer-") as tmp_s,
        helper_servers() as start,
        LocalMesh(Path(tmp_s) / "mesh") as mesh,
    ):
        tmp = Path(tmp_s)
        if not url:
            model = MODEL
            assert spec is not None and spec.origin is not None
            root = Path(spec.origin).parents[1]  # the directory holding the tests package
            url = f"http://127.0.0.1:{start(LLM_SERVER, str(root), MODEL)}"
        assert model is not None
        src = tmp / "docs"
        src.mkdir()
        for d in docs:
            (src / f"{d['_id']}.txt").write_text(doc_text(d), encoding="utf-8")
        mesh.env.update(
            {
                "HEARTHNET_LOG_LEVEL": "warning",
                "HEARTHNET_LLM_BASE_URL": url,
                "HEARTHNET_LLM_MODEL": model,
                "HEARTHNET_LLM_CONTEXT_TOKENS": "16384",
                "HEARTHNET_LLM_MAX_OUTPUT_TOKENS": str(MAX_TOKENS),
            }
        )
        node = mesh.add("a")
        mesh.found(node)
        out = node.cli_json("ingest", str(src), "--corpus", CORPUS, timeout=7200)
        failed = [r for r in out["results"] if not r.get("ok")]
        if failed:
            raise RuntimeError(f"{len(failed)} documents failed to ingest, first: {failed[0]}")
        lc = LangChainStyle(tmp / "peer", "peer")
        ids: list[str] = []
        texts: list[str] = []
        metas: list[dict[str, Any]] = []
        for d in docs:
            i, t, m = lc.split(f"{d['_id']}.txt", doc_text(d))
            ids, texts, metas = ids + i, texts + t, metas + m
        lc.add(ids, texts, metas)
        try:
            got = anyio.run(
                _measure, node.home, url, model, lc, questions, backend_options=event_loop_options()
            )
        except AnswerUnavailable as exc:
            return not_measured(f"answer.ask not available ({exc})")
        finally:
            lc.close()
    modes = {m: got.modes.count(m) for m in sorted(set(got.modes))}
    if not modes.get("generated"):
        raise RuntimeError(f"answer.ask never reached the model (modes {modes}): nothing to compare")
    server = "the tests' loopback server (answers at once)" if model == MODEL else f"{model} at {url}"
    rows: list[PeerMetric] = []
    for label, ours, peer in (
        ("time to first token", got.ours_ttft, got.peer_ttft),
        ("total time", got.ours_total, got.peer_total),
    ):
        o, p = percentile(ours, 0.5), percentile(peer, 0.5)
        rows.append(
            PeerMetric(
                "answer",
                f"answer.ask {label} vs a hand-built prompt to the same server, p50",
                "ms",
                round(o, 1),
                round(p, 1),
                "hand-built prompt",
                "(reported)",
                None,
                round(min(ours), 1),
                round(percentile(ours, 0.95), 1),
                round(min(peer), 1),
                round(percentile(peer, 0.95), 1),
                note=f"{len(ours)} SciFact claims over {len(docs)} documents; server: {server}; "
                f"modes {modes}; chunks in the prompt p50 {median_range(got.k)[0]:.0f} "
                "(the peer retrieves as many); max shown is p95",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in run(args.quick)]}, indent=2))


if __name__ == "__main__":
    main()
