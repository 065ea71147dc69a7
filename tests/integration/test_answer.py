"""``answer.ask`` in real node processes over TCP: a node without RAG or an embedder answers from a
corpus on another node, through its control socket, and a gossiped ingest refreshes its cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hearthnet.testing import LocalMesh, MeshNode, wait_for

DEMO = Path(__file__).resolve().parents[2] / "hearthnet" / "demo"
QUESTION = "When is the gas boiler serviced?"


def ask(node: MeshNode, **input: Any) -> dict[str, Any]:
    result: dict[str, Any] = node.cli_json("call", "answer.ask", "--input", json.dumps(input), timeout=120)
    return result


def test_a_node_without_rag_answers_from_a_peers_corpus_and_learns_of_its_new_documents(
    tmp_path: Path,
) -> None:
    with LocalMesh(tmp_path) as mesh:
        a = mesh.add("hearth")
        b = mesh.add("laptop", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        mesh.found(a)
        mesh.invite(a, b, "member")
        mesh.wait_full_mesh()
        a.cli_json("ingest", str(DEMO / "heating_handbook.pdf"), "--corpus", "house", timeout=180)
        wait_for(
            lambda: "rag.query@1.0" in {c["capability"] for c in b.cli_json("status")["capabilities"]},
            timeout=30,
            what="laptop to learn of the house corpus",
        )
        first = ask(b, question=QUESTION, session="kitchen")
        out = first["output"]
        assert first["provider"] == b.node_id  # the composer runs on the node that was asked
        assert out["mode"] == "extractive" and out["meta"]["rag"] == "used"
        assert out["meta"]["corpora"]["house"]["node"] == a.node_id
        assert "serviced every year in early October" in out["answer"]
        assert out["citations"] and out["sources"][0]["node"] == a.node_id
        assert out["meta"]["extractive_ranking"] == "embedding"  # embed.text served by the hearth
        assert ask(b, question=QUESTION, session="kitchen")["output"]["meta"]["cache"] == "hit"
        # a new document in the corpus: its event reaches the laptop, whose cached answer goes
        a.cli_json("ingest", str(DEMO / "garden_and_seeds.pdf"), "--corpus", "house", timeout=180)
        wait_for(
            lambda: len(b.cli_json("events")["events"]) == len(a.cli_json("events")["events"]),
            timeout=30,
            what="the ingest event to reach the laptop",
        )
        assert ask(b, question=QUESTION, session="kitchen")["output"]["meta"]["cache"] == "miss"
        sessions = b.cli_json("call", "answer.sessions")["output"]["sessions"]
        assert [(s["id"], s["turns"]) for s in sessions] == [("kitchen", 3)]
        assert (b.home / "answer.sqlite3").exists()
        # the composer is this node's own: the hearth does not offer it to peers
        refused = a.cli(
            "call",
            "answer.ask",
            "--provider",
            b.node_id,
            "--input",
            json.dumps({"question": "q"}),
            check=False,
        )
        assert refused.returncode != 0 and refused.stderr.startswith("hearthnet: ")
