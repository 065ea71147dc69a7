"""The node's log file after a real ingest and real queries through two node processes: it holds
what happened (ids, counts, timings) and never a document's text, a question or a vector."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hearthnet.testing import LocalMesh
from tests.shared_data import PDF_DIR

STORY = (
    "The marmalade lighthouse keeper Quillon Brasswick hides the spare key under the ninth "
    "cobalt stone, beside the tide bell that rings only on Thursdays."
)
QUESTION = "Where does Quillon Brasswick hide the spare key?"
PDFS = [PDF_DIR / "multicolumn_2col_latex.pdf", PDF_DIR / "corrupt_damaged_stream.pdf"]


def strings(value: Any) -> Iterator[str]:
    """Every string in a decoded record (keys too), however deep."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def longest_number_list(value: Any) -> int:
    if isinstance(value, dict):
        return max((longest_number_list(v) for v in value.values()), default=0)
    if isinstance(value, list):
        own = len(value) if value and all(isinstance(v, int | float) for v in value) else 0
        return max([own, *(longest_number_list(v) for v in value)])
    return 0


def test_the_log_file_holds_no_document_text_question_or_vector(tmp_path: Path) -> None:
    story = tmp_path / "lighthouse.txt"
    story.write_text(STORY + "\n", encoding="utf-8")
    with LocalMesh(tmp_path / "mesh", env=None) as mesh:
        mesh.env["HEARTHNET_LOG_LEVEL"] = "debug"  # everything a node would ever log
        a = mesh.add("a")
        b = mesh.add("b", env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        mesh.found(a)
        mesh.invite(a, b, "member")
        mesh.wait_full_mesh(timeout=90)
        ingest = a.cli(
            "ingest", str(story), *map(str, PDFS), "--corpus", "family", "--json", check=False, timeout=900
        )
        results = json.loads(ingest.stdout)["results"]
        assert results[0]["ok"], results
        answer = b.cli_json("query", QUESTION, "--corpus", "family", "-k", "3")  # through A, over the wire
        assert "Brasswick" in answer["chunks"][0]["text"]
        other = a.cli_json("query", "columns of text in a LaTeX document", "--corpus", "family", "-k", "5")
        texts = [c["text"] for c in answer["chunks"] + other["chunks"]]
        assert len(texts) >= 4
        logged = a.cli_json("logs", "-n", "100000")["records"]
        mesh.close()  # each node writes what it still had queued before it exits
        for node in (a, b):
            records = [
                json.loads(line) for line in (node.home / "logs" / "node.log").read_text().splitlines()
            ]
            events = {r["event"] for r in records}
            assert {"node_started", "node_stopped"} <= events
            text = "\n".join(s for r in records for s in strings(r))
            secrets = [QUESTION, "Brasswick", "marmalade", "cobalt stone"]
            secrets += [" ".join(t.split())[len(t) // 3 :][:40] for t in texts]  # a piece of each chunk
            leaked = [s for s in secrets if s and s in " ".join(text.split())]
            assert not leaked, f"{node.name}'s log file holds {leaked}"
            assert max(longest_number_list(r) for r in records) < 16  # no vector
        a_events = {r["event"] for r in records_of(a.home)}
        assert {"rag_ingested", "rag_query"} <= a_events  # the work itself was logged, by ids and counts
        assert any(r["event"] == "rag_query" for r in logged)  # `hearthnet logs` read the same file


def records_of(home: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (home / "logs" / "node.log").read_text().splitlines()]
