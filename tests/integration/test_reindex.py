"""A corpus embedded with another model is not served until `hearthnet rag reindex` re-embeds it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hearthnet.testing import LocalMesh
from tests.openai_server import DIM, OpenAIEmbeddingServer

DEMO = Path(__file__).resolve().parents[2] / "hearthnet" / "demo"
OTHER_MODEL = "hashed-words-64"


@pytest.fixture
def server() -> Iterator[OpenAIEmbeddingServer]:
    s = OpenAIEmbeddingServer(OTHER_MODEL)
    try:
        yield s
    finally:
        s.close()


def test_model_mismatch_is_refused_then_reindex_reembeds_from_blobs(
    tmp_path: Path, server: OpenAIEmbeddingServer
) -> None:
    with LocalMesh(tmp_path) as mesh:
        a = mesh.add("a")
        with (a.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[embedding.openai]]\nbase_url = "{server.url}"\nmodel = "{OTHER_MODEL}"\n'
                f"dim = {DIM}\nmax_tokens = 256\n"
            )
        mesh.found(a)
        out = a.cli_json("ingest", *map(str, sorted(DEMO.glob("*.pdf"))), "--corpus", "home")
        assert all(r["ok"] for r in out["results"])
        assert a.cli_json("query", "boiler service", "--corpus", "home")["chunks"]

        # The node now embeds with another model: the corpus is not served, and says how to fix it.
        a.stop()
        a.extra_env["HEARTHNET_RAG_MODEL"] = OTHER_MODEL
        a.start()
        a.wait_ready()
        proc = a.cli("query", "boiler service", "--corpus", "home", check=False)
        assert proc.returncode != 0
        assert proc.stderr.startswith("hearthnet: not_found:")
        assert "hearthnet rag reindex --corpus home" in proc.stderr
        new_doc = tmp_path / "notes.txt"
        new_doc.write_text("The garden tap is drained in October before the first frost.\n")
        served = server.requests
        proc = a.cli("ingest", str(new_doc), "--corpus", "home", check=False)  # refused before embedding
        assert proc.returncode != 0
        assert proc.stdout.startswith("FAIL  notes.txt: not_found:")
        assert "hearthnet rag reindex --corpus home" in proc.stdout
        assert proc.stderr == "hearthnet: 1 file failed to ingest\n"  # one line, no traceback
        assert server.requests == served

        served_before = server.requests
        result = a.cli_json("rag", "reindex", "--corpus", "home", timeout=300)
        assert result["docs"] == 3 and result["embedding_model"] == OTHER_MODEL
        assert server.requests > served_before
        hit = a.cli_json("query", "When is the boiler serviced?", "--corpus", "home")
        assert hit["meta"]["embedding_model"] == OTHER_MODEL
        assert hit["chunks"][0]["metadata"]["doc_title"] == "Heating and Hot Water Handbook"
        corpora = {c["name"]: c for c in a.cli_json("corpora")["corpora"]}
        assert corpora["home"]["embedding_model"] == OTHER_MODEL and corpora["home"]["docs"] == 3
