"""``answer.ask`` beside what it composes, measured in the same run, question by question.

Mesh of real node processes on 127.0.0.1: ``r1``, ``r2``, ``r3`` each hold one
corpus (``c1``..``c3``: the first pages of Walden, the IRS 1040-NR instructions
and a paper on creativity in machine learning, from the shared PDFs), ``r3``
also serves ``llm.chat`` backed by the loopback OpenAI-compatible server
(``tests/openai_chat_server.py``) in a helper process, which waits a fixed
``FIRST_TOKEN_DELAY`` before its first word; ``asker`` has no RAG, embedder or
model.  Every call goes through one kept control connection of a client on the
asker, as a front door's would.

1. **Time to first token**: ``answer.ask {corpora: [c1], cache: false}``,
   from the call to the first ``{delta}`` frame.  Floor: ``rag.query`` of ``c1``
   with the composer's ``k`` (20) through the same client, plus the server's own
   time to first token, asked directly from this process (httpx, a kept
   connection, the same chunks as context).  Target: p50 <= floor + 30 ms.
2. **Fan-out**: ``answer.ask`` over ``c1..c3`` (``cache: false``), from the call
   to the retrieval frame in which every corpus has settled.  Floor: the slowest
   of ``rag.query`` of ``c1``, ``c2`` and ``c3`` asked one after another, each
   alone.  Target: p50 <= 1.3x.
   Reference, same rounds: the three ``rag.query`` calls at once from the
   client, with no composer, and the providers' own embedding times alone and
   at once (each node embeds the question itself: on a 2-core host three
   embeddings at once take longer than one).
3. **Cache hit**: the fan-out's question asked again (cache on): the whole
   answer.  Beside it, ``node.ping`` through the same client, just before (so
   neither pays for waking an idle node process).  Target: p50 <= 5 ms.

4. **Abstention** (issue 34): one node holding five corpora (the first pages of five shared
   PDFs, ``bench/answer_questions.py``) and no model answers the set's answerable and unanswerable
   questions (``cache: false``): the share of unanswerable ones answered "the documents do not
   say" (target >= 90 %) and the share of answerable ones answered (>= 90 %) at the node's
   ``[answer] abstain_threshold``; beside them each question's best cosine (``rag.query``'s
   similarity over the corpora), from which the bar was chosen.

For each question of each round: (1) ask, rag.query + direct TTFT, (2) ask,
three single queries, the three at once, (3) ping, cached ask -- so the
machine's noise lands on ours and the floors alike.  Per round the p50 of each; reported: the median of the
rounds' p50s with min-max.

    python -m bench.answer [--quick] [--abstain-only]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.answer_questions import ANSWERABLE, UNANSWERABLE
from bench.answer_questions import CORPORA as ABSTAIN_CORPORA
from bench.common import (
    SHARED_DATA,
    Metric,
    helper_servers,
    machine,
    median_range,
    node_like_process,
    percentile,
)
from bench.rag import first_pages
from hearthnet.client import AsyncClient
from hearthnet.config import AnswerConfig
from hearthnet.runtime.process_settings import event_loop_options
from hearthnet.testing import LocalMesh, MeshNode, wait_for

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-chat"
FIRST_TOKEN_DELAY = 0.05
"""Seconds the chat server waits before its first word: the LLM's own time to first token."""
K = 20
"""The ``k`` the composer asks each corpus for (``min(k_max, top_k_max, 20)``)."""
CORPORA = {
    "c1": "en_walden_thoreau_249p.pdf",
    "c2": "en_irs_i1040nr_instructions.pdf",
    "c3": "en_paper_creativity_in_ml.pdf",
}
QUESTIONS = [
    "Why did the author go to live in the woods?",
    "How much did it cost to build the house by the pond?",
    "What does the author say about clothing and fashion?",
    "Who has to file Form 1040-NR?",
    "When is the tax return of a nonresident alien due?",
    "Which income is effectively connected with a trade or business in the United States?",
    "How can creativity of a machine learning model be measured?",
    "Can generative models produce novel and valuable artifacts?",
    "What is the difference between novelty and surprise?",
    "How do people spend their mornings according to the book?",
    "What happens if you do not file the return on time?",
    "Which datasets were used to evaluate the creative systems?",
]
CHAT_SERVER = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.openai_chat_server import main
main(sys.argv[1:])
"""


class Probe:
    """The calls one question is timed with, all through one kept client on the asker."""

    def __init__(self, client: AsyncClient, http: httpx.AsyncClient, llm_url: str) -> None:
        self.client = client
        self.http = http
        self.llm_url = llm_url

    async def rag_query(self, corpus: str, question: str) -> tuple[float, list[str], float]:
        """ms through the client, the chunks' texts, and the provider's own ms embedding the question."""
        t = time.perf_counter()
        res = await self.client.call("rag.query", {"corpus": corpus}, {"query": question, "k": K})
        ms = (time.perf_counter() - t) * 1000
        return ms, [str(c.get("text") or "") for c in res.output["chunks"]], float(res.meta["embed_ms"])

    async def llm_ttft(self, question: str, texts: list[str]) -> float:
        """The chat server's own time to first token, asked directly with the same context."""
        body = {
            "model": MODEL,
            "stream": True,
            "max_tokens": 256,
            "messages": [
                {"role": "system", "content": "Context:\n" + "\n".join(f'- "{t}"' for t in texts)},
                {"role": "user", "content": question},
            ],
        }
        first: float | None = None
        t = time.perf_counter()
        async with self.http.stream("POST", f"{self.llm_url}/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():  # to the end: the connection is kept for the next
                if first is None and line.startswith("data: {") and '"content"' in line:
                    first = (time.perf_counter() - t) * 1000
        if first is None:
            raise RuntimeError("the chat server sent no word")
        return first

    async def ask(self, question: str, corpora: list[str], *, cache: bool) -> dict[str, Any]:
        """One ``answer.ask``: ms to the first delta, to every corpus settled, to the end; its output."""
        inp: dict[str, Any] = {"question": question, "corpora": corpora, "debug": True}
        if not cache:
            inp["cache"] = False
        t = time.perf_counter()
        first = settled = None
        async with self.client.stream("answer.ask", input=inp) as call:
            async for frame in call.frames():
                now = (time.perf_counter() - t) * 1000
                statuses = frame.get("corpora")
                if settled is None and isinstance(statuses, dict) and "pending" not in statuses.values():
                    settled = now
                if first is None and frame.get("delta"):
                    first = now
            result = await call.result()
        total = (time.perf_counter() - t) * 1000
        out = result.output
        if out["mode"] != "generated" or out["meta"]["rag"] != "used":
            raise RuntimeError(f"answer.ask did not use the documents and the model: {out['meta']}")
        return {"first": first, "settled": settled, "total": total, "output": out}

    async def at_once(self, question: str) -> tuple[float, float]:
        """``rag.query`` of c1, c2 and c3 all at once from the client, no composer: ms until the last,
        and the slowest provider's ms embedding the question meanwhile."""
        embeds: list[float] = []

        async def one(corpus: str) -> None:
            embeds.append((await self.rag_query(corpus, question))[2])

        t = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for corpus in ("c1", "c2", "c3"):
                tg.start_soon(one, corpus)
        return (time.perf_counter() - t) * 1000, max(embeds)

    async def ping(self) -> float:
        t = time.perf_counter()
        await self.client.call("node.ping")
        return (time.perf_counter() - t) * 1000


async def one_round(asker: MeshNode, llm_url: str, questions: list[str], warm: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "ask_ttft",
            "rag_c1",
            "llm_ttft",
            "floor_ttft",
            "node_retrieve",
            "node_llm_ttft",
            "fanout",
            "slowest",
            "node_fanout",
            "at_once",
            "embed_alone",
            "embed_at_once",
            "hit",
            "node_hit",
            "ping",
        )
    }
    async with AsyncClient(asker.home) as client, httpx.AsyncClient(timeout=30) as http:
        probe = Probe(client, http, llm_url)
        for i, q in enumerate(questions[:warm] + questions):
            keep = i >= warm
            # 1. time to first token, beside retrieval alone + the server's own first token
            asked = await probe.ask(q, ["c1"], cache=False)
            rag_ms, texts, _ = await probe.rag_query("c1", q)
            llm_ms = await probe.llm_ttft(q, texts)
            # 2. fan-out over three corpora on three nodes, beside each corpus alone
            fanned = await probe.ask(q, ["c1", "c2", "c3"], cache=False)
            singles = [await probe.rag_query(c, q) for c in ("c1", "c2", "c3")]
            at_once, embed_at_once = await probe.at_once(q)
            # 3. the same question again: answered from the cache (after a ping on the same
            # connection: neither pays for waking the idle node process on a loaded host)
            ping = await probe.ping()
            hit = await probe.ask(q, ["c1", "c2", "c3"], cache=True)
            if hit["output"]["meta"]["cache"] != "hit":
                raise RuntimeError("the repeated question was not answered from the cache")
            if not keep:
                continue
            debug = asked["output"]["meta"]["debug"]
            out["ask_ttft"].append(asked["first"])
            out["rag_c1"].append(rag_ms)
            out["llm_ttft"].append(llm_ms)
            out["floor_ttft"].append(rag_ms + llm_ms)
            out["node_retrieve"].append(debug["retrieve_ms"])
            out["node_llm_ttft"].append(debug["ttft_ms"])
            out["fanout"].append(fanned["settled"])
            out["slowest"].append(max(ms for ms, _, _ in singles))
            out["embed_alone"].append(max(e for _, _, e in singles))
            out["embed_at_once"].append(embed_at_once)
            out["node_fanout"].append(fanned["output"]["meta"]["debug"]["retrieve_ms"])
            out["at_once"].append(at_once)
            out["hit"].append(hit["total"])
            out["node_hit"].append(hit["output"]["meta"]["debug"]["total_ms"])
            out["ping"].append(ping)
    return out


def build_mesh(mesh: LocalMesh, tmp: Path, pages: int, llm_url: str) -> MeshNode:
    mesh.env["HEARTHNET_LOG_LEVEL"] = "warning"
    bare = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}
    llm = {
        "HEARTHNET_LLM_BASE_URL": llm_url,
        "HEARTHNET_LLM_MODEL": MODEL,
        "HEARTHNET_LLM_CONTEXT_TOKENS": "16384",
        "HEARTHNET_LLM_MAX_OUTPUT_TOKENS": "256",
    }
    holders = [mesh.add("r1"), mesh.add("r2"), mesh.add("r3", env=llm)]
    asker = mesh.add("asker", env=bare)
    with (asker.home / "config.toml").open("a") as f:  # timed: generated answers, whatever the question's fit
        f.write("\n[answer]\nabstain_threshold = 0.0\n")
    mesh.found(holders[0])
    for node in holders[1:]:
        mesh.invite(holders[0], node, "trusted")
    mesh.invite(holders[0], asker, "member")
    mesh.wait_full_mesh(timeout=120)
    for node, (corpus, name) in zip(holders, CORPORA.items(), strict=True):
        pdf = first_pages(SHARED_DATA / "pdfs" / name, pages, tmp / f"{corpus}.pdf")
        res = node.cli_json("ingest", str(pdf), "--corpus", corpus, timeout=1800)["results"][0]
        if not res.get("ok"):
            raise RuntimeError(f"ingest of {name} failed: {res}")

    def ready() -> bool:
        caps = asker.status()["capabilities"]
        corpora = {c["params"].get("corpus") for c in caps if c["capability"].startswith("rag.query@")}
        return set(CORPORA) <= corpora and any(c["capability"].startswith("llm.chat@") for c in caps)

    wait_for(ready, timeout=60, what="the asker to see three corpora and the model")
    return asker


def run(quick: bool = False) -> list[Metric]:
    node_like_process()
    pages, rounds, warm = (8, 3, 2) if quick else (30, 5, 3)
    questions = QUESTIONS if not quick else QUESTIONS[:9]
    runs: list[dict[str, list[float]]] = []
    with (
        tempfile.TemporaryDirectory(prefix="hn-answer-") as tmp,
        helper_servers() as start,
        LocalMesh(Path(tmp) / "mesh") as mesh,
    ):
        port = start(
            CHAT_SERVER, "--model", MODEL, "--first-token-delay", str(FIRST_TOKEN_DELAY), "--cite-each-file"
        )
        llm_url = f"http://127.0.0.1:{port}"
        asker = build_mesh(mesh, Path(tmp), pages, llm_url)
        for _ in range(rounds):
            runs.append(
                anyio.run(one_round, asker, llm_url, questions, warm, backend_options=event_loop_options())
            )

    def p50(key: str) -> tuple[float, float, float]:
        return median_range([percentile(r[key], 0.5) for r in runs])

    ttft, floor_ttft = p50("ask_ttft"), p50("floor_ttft")[0]
    fan, slowest, at_once = p50("fanout"), p50("slowest")[0], p50("at_once")
    hit, ping = p50("hit"), p50("ping")[0]
    size = f"{len(questions)} questions x {rounds} rounds, {pages} pages per corpus"
    timed = [
        Metric(
            "answer",
            "answer.ask time to first token vs rag.query + the LLM server's own first token",
            "ms",
            round(ttft[0], 1),
            round(floor_ttft, 1),
            round(ttft[0] / floor_ttft, 3),
            "<= floor + 30 ms",
            ttft[0] - floor_ttft <= 30,
            round(ttft[1], 1),
            round(ttft[2], 1),
            note=(
                f"+{ttft[0] - floor_ttft:.1f} ms; floor = rag.query c1 p50 {p50('rag_c1')[0]:.1f} ms "
                f"+ server TTFT p50 {p50('llm_ttft')[0]:.1f} ms "
                f"(first-token delay {FIRST_TOKEN_DELAY * 1000:.0f} ms); "
                f"in the node: retrieval {p50('node_retrieve')[0]:.1f} ms, llm.chat first token "
                f"{p50('node_llm_ttft')[0]:.1f} ms; {size}"
            ),
        ),
        Metric(
            "answer",
            "answer.ask fan-out over 3 corpora on 3 nodes vs the slowest single corpus query",
            "ms",
            round(fan[0], 1),
            round(slowest, 1),
            round(fan[0] / slowest, 3),
            "<= 1.3x",
            fan[0] <= 1.3 * slowest,
            round(fan[1], 1),
            round(fan[2], 1),
            note=(
                f"ours: call to the retrieval frame with every corpus settled; in the node "
                f"{p50('node_fanout')[0]:.1f} ms; floor: the slowest of rag.query c1, c2, c3 each alone, "
                f"through the same client; {size}"
            ),
        ),
        Metric(
            "answer",
            "reference: rag.query of the 3 corpora at once from the client (no composer) "
            "vs the slowest alone",
            "ms",
            round(at_once[0], 1),
            round(slowest, 1),
            round(at_once[0] / slowest, 3),
            "(reported)",
            None,
            round(at_once[1], 1),
            round(at_once[2], 1),
            note=(
                f"the fan-out above is {fan[0] / at_once[0]:.2f}x this; each node embeds the question "
                "itself: "
                f"the slowest provider's embedding took {p50('embed_alone')[0]:.1f} ms alone and "
                f"{p50('embed_at_once')[0]:.1f} ms with the other two at once (p50)"
            ),
        ),
        Metric(
            "answer",
            "answer.ask cache hit (whole answer, through the control socket)",
            "ms",
            round(hit[0], 2),
            round(ping, 2),
            round(hit[0] / ping, 2),
            "<= 5 ms",
            hit[0] <= 5,
            round(hit[1], 2),
            round(hit[2], 2),
            note=f"floor: node.ping through the same client; in the node {p50('node_hit')[0]:.2f} ms; {size}",
        ),
    ]
    return [*timed, *abstention()]


PART_PAGES = 4
"""Pages per document the abstention corpora are ingested in."""


def page_range(src: Path, start: int, end: int, dest: Path) -> Path:
    """Pages ``start..end-1`` of ``src`` as a PDF of their own."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(str(src))
    writer = PdfWriter()
    for page in reader.pages[start:end]:
        writer.add_page(page)
    with dest.open("wb") as fh:
        writer.write(fh)
    return dest


def _ingest_part(node: MeshNode, corpus: str, src: Path, start: int, end: int, tmp: str) -> None:
    """Pages ``start..end-1`` of ``src`` into ``corpus``; halved and retried when the busy host's
    embedder misses its deadline."""
    pdf = page_range(src, start, end, Path(tmp) / f"{corpus}-{start}-{end}.pdf")
    proc = node.cli("ingest", str(pdf), "--corpus", corpus, "--json", check=False, timeout=1800)
    res = json.loads(proc.stdout)["results"][0] if proc.stdout.strip() else {}
    if res.get("ok"):
        return
    if res.get("error") != "timeout" or end - start < 2:
        raise RuntimeError(f"ingest of {src.name} pages {start + 1}-{end} failed: {res or proc.stderr}")
    middle = (start + end) // 2
    _ingest_part(node, corpus, src, start, middle, tmp)
    _ingest_part(node, corpus, src, middle, end, tmp)


async def _abstain_round(node: MeshNode) -> list[tuple[str, bool, float, str]]:
    """(question, answerable, best cosine, mode) per question of the set."""
    out = []
    questions = [(q, True) for q, _, _ in ANSWERABLE] + [(q, False) for q in UNANSWERABLE]
    async with AsyncClient(node.home) as client:
        for question, answerable in questions:
            best = 0.0
            for corpus in ABSTAIN_CORPORA:
                res = await client.call("rag.query", {"corpus": corpus}, {"query": question, "k": K})
                for c in res.output["chunks"]:
                    best = max(best, float(c.get("similarity", c["score"])))
            inp = {"question": question, "corpora": list(ABSTAIN_CORPORA), "cache": False, "debug": False}
            async with client.stream("answer.ask", input=inp) as call:
                async for _ in call.frames():
                    pass
                mode = str((await call.result()).output["mode"])
            out.append((question, answerable, best, mode))
    return out


def abstention() -> list[Metric]:
    """Issue 34's abstention and answer rates on the question set, at the node's configured bar."""
    node_like_process()
    with tempfile.TemporaryDirectory(prefix="hn-abstain-") as tmp, LocalMesh(Path(tmp) / "mesh") as mesh:
        mesh.env["HEARTHNET_LOG_LEVEL"] = "warning"
        node = mesh.add("library")
        mesh.found(node)
        for corpus, (name, pages) in ABSTAIN_CORPORA.items():
            for start in range(0, pages, PART_PAGES):  # parts: one embed.text deadline each, on a busy host
                _ingest_part(
                    node, corpus, SHARED_DATA / "pdfs" / name, start, min(pages, start + PART_PAGES), tmp
                )
        rows = anyio.run(_abstain_round, node, backend_options=event_loop_options())
    for question, answerable, best, mode in sorted(rows, key=lambda r: r[2]):  # the spread, for the bar
        print(
            f"{best:.3f} {'answerable' if answerable else 'unanswerable':12} {mode:10} {question}",
            file=sys.stderr,
        )
    bar = AnswerConfig().abstain_threshold
    yes = [r for r in rows if r[1]]
    no = [r for r in rows if not r[1]]
    answered = sum(r[3] != "abstained" for r in yes) / len(yes)
    abstained = sum(r[3] == "abstained" for r in no) / len(no)
    missed = "; ".join(f"{q[:40]!r} {b:.3f}" for q, _, b, m in yes if m == "abstained") or "none"
    wrong = "; ".join(f"{q[:40]!r} {b:.3f}" for q, _, b, m in no if m != "abstained") or "none"
    spread = (
        f"best cosine: answerable {min(r[2] for r in yes):.3f}..{max(r[2] for r in yes):.3f}, "
        f"unanswerable {min(r[2] for r in no):.3f}..{max(r[2] for r in no):.3f}; bar {bar}"
    )
    return [
        Metric(
            "34",
            f"abstention: unanswerable questions answered 'the documents do not say' ({len(no)})",
            "%",
            round(100 * abstained, 1),
            None,
            None,
            ">= 90 %",
            abstained >= 0.9,
            note=f"{spread}; answered anyway: {wrong}",
        ),
        Metric(
            "34",
            f"abstention: answerable questions answered ({len(yes)})",
            "%",
            round(100 * answered, 1),
            None,
            None,
            ">= 90 %",
            answered >= 0.9,
            note=f"abstained on: {missed}",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--abstain-only", action="store_true", help="only the abstention rates (issue 34)")
    args = parser.parse_args()
    metrics = abstention() if args.abstain_only else run(args.quick)
    print(json.dumps({"machine": machine(), "metrics": [m.to_json() for m in metrics]}, indent=2))


if __name__ == "__main__":
    main()
