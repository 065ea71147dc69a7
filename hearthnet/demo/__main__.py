"""``make demo``: a three-node community on 127.0.0.1 that ingests real PDFs and answers across nodes.

- node A ("hearth")  serves embed.text and rag
- node B ("pantry")  serves rag without an embedder: it embeds through A
- node C ("laptop")  a trusted member's laptop with neither

From C we ingest the PDFs shipped in ``hearthnet/demo/`` into a corpus hosted
on B, query it from C and from A, show the ingest events on all three, and ask
C two questions with ``hearthnet ask``: the answers are extractive (quoted
sentences with citations) unless ``HEARTHNET_LLM_BASE_URL`` and
``HEARTHNET_LLM_MODEL`` are set, in which case node A serves that model as
``llm.chat`` and the answers are generated.  Everything runs in a temporary
directory that is removed at the end.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from hearthnet.contracts.rag import INGESTED
from hearthnet.testing import LocalMesh, MeshNode, wait_for

DOCS = Path(__file__).resolve().parent
CORPUS = "household"
QUESTIONS = [
    ("C (laptop)", "When is the boiler serviced?"),
    ("A (hearth)", "How much energy can the home battery store?"),
    ("C (laptop)", "When should tomatoes be planted out?"),
]
ASKED = [
    "When is the boiler serviced, and where is its service record kept?",
    "What should I do if the inverter shows error 31?",
]


def say(text: str = "") -> None:
    print(text, flush=True)


def step(n: int, text: str) -> None:
    say(f"\n[{n}] {text}")


def show_answer(node: MeshNode, label: str, question: str) -> None:
    started = time.monotonic()
    out = node.cli_json("query", question, "--corpus", CORPUS, "-k", "3")
    ms = (time.monotonic() - started) * 1000
    say(f"    {label} asks: {question!r}   ({ms:.0f} ms through the CLI, served by {short(out['provider'])})")
    for chunk in out["chunks"]:
        md = chunk["metadata"]
        snippet = textwrap.shorten(" ".join(chunk["text"].split()), 110)
        where = f"{md['doc_title']}, page {md['page']}"
        say(f"      {chunk['rank']}. score {chunk['score']:.3f}  {where}: {snippet}")


def llm_env(env: dict[str, str]) -> dict[str, str]:
    """Take the ``HEARTHNET_LLM_*`` settings out of the mesh's environment: only node A gets them."""
    return {key: env.pop(key) for key in [k for k in env if k.startswith("HEARTHNET_LLM")]}


def show_asked(node: MeshNode, question: str) -> None:
    started = time.monotonic()
    proc = node.cli("ask", question, timeout=300)
    ms = (time.monotonic() - started) * 1000
    say(f"    C asks: {question!r}   ({ms:.0f} ms through the CLI)")
    for line in proc.stdout.rstrip("\n").splitlines():
        say(f"      {line}".rstrip())


def short(node_id: str) -> str:
    return node_id[:18] + "…"


def show_ingest_events(node: MeshNode, count: int) -> None:
    """Wait until ``node`` holds ``count`` ingest events (gossip), then name their documents."""

    def ingested() -> list[dict[str, Any]]:
        return [e for e in node.cli_json("events")["events"] if e["event_type"] == INGESTED]

    wait_for(lambda: len(ingested()) == count, timeout=30, what=f"{node.name} to receive the ingest events")
    events = ingested()
    titles = ", ".join(e["data"]["title"] for e in events)
    say(f"    {node.name:7} has {len(events)} ingest events: {titles}")


def main() -> int:
    pdfs = sorted(DOCS.glob("*.pdf"))
    if not pdfs:
        say(f"no demo documents in {DOCS}")
        return 1
    with tempfile.TemporaryDirectory(prefix="hearthnet-demo-") as tmp:
        mesh = LocalMesh(Path(tmp))
        mesh.env["HEARTHNET_LOG_LEVEL"] = "warning"
        model_env = llm_env(mesh.env)
        try:
            step(1, "Creating three nodes, each with its own Ed25519 identity")
            a = mesh.add("hearth", env=model_env)
            b = mesh.add("pantry", env={"HEARTHNET_EMBEDDING": "0"})
            c = mesh.add("laptop", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
            for label, node in (("A hearth", a), ("B pantry", b), ("C laptop", c)):
                say(f"    {label}: {node.node_id}")

            step(2, "A founds the community 'smiths' and invites B and C as trusted members")
            mesh.found(a, "smiths")
            mesh.invite(a, b, "trusted")
            mesh.invite(a, c, "trusted")
            mesh.wait_full_mesh(timeout=90)
            for node in (a, b, c):
                status = node.status()
                peers = ", ".join(f"{p['name']} ({p['level']})" for p in status["peers"])
                say(f"    {status['name']:7} is {status['level']:7} and sees: {peers}")
            wait_for(
                lambda: any(cap["capability"] == "embed.text@1.0" for cap in b.status()["capabilities"]),
                timeout=60,
                what="B to see A's embedder",
            )
            say("    B has no embedder of its own; the bus routes its embed.text calls to A.")

            step(3, f"From C, ingest {len(pdfs)} PDFs into corpus '{CORPUS}' hosted on B")
            result = c.cli_json("ingest", *map(str, pdfs), "--corpus", CORPUS, "--on", b.node_id, timeout=600)
            for r in result["results"]:
                say(f"    {Path(r['path']).name:24} -> {r['chunks_indexed']} chunks on {short(r['node'])}")

            step(4, "Query the corpus from C and from A (neither holds it: the bus routes to B)")
            for label, question in QUESTIONS:
                node = c if label.startswith("C") else a
                show_answer(node, label, question)

            step(5, "Every node holds the signed rag.document.ingested events (gossip)")
            for node in (a, b, c):
                show_ingest_events(node, len(pdfs))

            step(6, "Corpora reachable from C")
            for corpus in c.cli_json("corpora")["corpora"]:
                say(
                    f"    {corpus['name']}: {corpus['docs']} documents, {corpus['chunks']} chunks, "
                    f"{corpus['embedding_model']}, on {short(corpus['node'])}"
                )

            step(7, "From C, 'hearthnet ask': answers from the documents, with their sources")
            if model_env.get("HEARTHNET_LLM_BASE_URL"):
                wait_for(lambda: c.cli_json("llm")["models"], timeout=60, what="C to see A's llm.chat")
                say(
                    f"    A serves llm.chat with {model_env.get('HEARTHNET_LLM_MODEL')!r} from "
                    f"{model_env['HEARTHNET_LLM_BASE_URL']}: the answers are generated and cite "
                    "their passages."
                )
            else:
                say(
                    "    No llm.chat provider is configured, so the answers are extractive: the sentences\n"
                    "    of the documents closest to the question, quoted with their citations. (Set\n"
                    "    HEARTHNET_LLM_BASE_URL and HEARTHNET_LLM_MODEL for a model served by A.)"
                )
            for question in ASKED:
                show_asked(c, question)
            say("\nDone. Stopping the nodes and removing the temporary homes.")
            return 0
        except Exception as exc:
            say(f"\ndemo failed: {exc}")
            for node in mesh.nodes.values():
                say(f"--- last log lines of {node.name} ---\n{node.log_tail(8)}")
            return 1
        finally:
            mesh.close()


if __name__ == "__main__":
    sys.exit(main())
