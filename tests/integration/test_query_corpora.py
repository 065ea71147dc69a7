"""``hearthnet query`` over several corpora keeps every option of the one-corpus query: ``--mode``,
``-k`` and ``--filter`` reach each corpus's ``rag.query`` (the several-corpora path once dropped
``--mode`` and ranked by the hosts' default, hybrid, instead).

A: embeds and hosts ``alpha``.  B: hosts ``beta`` (embeds through A).  Only one document of
``alpha`` holds the rare word asked for: a keyword search finds it alone, while a dense or
hybrid search answers with ``k`` chunks from both corpora.  (``alpha`` has four documents: BM25
gives a word found in half of a corpus's documents no weight.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for

WORD = "quorvaxite"
"""A word no embedding model knows, in one document only."""


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    root = tmp_path_factory.mktemp("query-corpora")
    m = LocalMesh(root)
    try:
        a = m.add("a")
        b = m.add("b", env={"HEARTHNET_EMBEDDING": "0"})
        m.found(a)
        m.invite(a, b, "trusted")
        m.wait_full_mesh(timeout=90)
        wait_for(
            lambda: any(x["capability"] == "embed.text@1.0" for x in b.status()["capabilities"]),
            timeout=60,
            what="B to see A's embedder",
        )
        docs = root / "docs"
        docs.mkdir()
        texts = {
            "alpha/mineral.md": f"# Minerals\n\nThe {WORD} crystal is green and glows faintly at night.\n",
            "alpha/garden.md": "# Garden\n\nTomatoes want sun, water in the morning and a stake to climb.\n",
            "alpha/bikes.md": "# Bikes\n\nOil the chain after rain and keep the tyres at their pressure.\n",
            "alpha/birds.md": "# Birds\n\nRobins sing at dawn; a feeder by the window brings finches.\n",
            "beta/boiler.md": "# Boiler\n\nBleed the radiators each autumn and check the pressure gauge.\n",
            "beta/bread.md": "# Bread\n\nKnead the dough for ten minutes, then let it rise for an hour.\n",
        }
        for name, text in texts.items():
            (docs / name).parent.mkdir(exist_ok=True)
            (docs / name).write_text(text, encoding="utf-8")
        for node, corpus in ((a, "alpha"), (b, "beta")):
            out = node.cli_json("ingest", str(docs / corpus), "--corpus", corpus, timeout=300)
            assert all(r["ok"] for r in out["results"]), out
        wait_for(
            lambda: (
                {"alpha", "beta"}
                <= {
                    x["params"].get("corpus")
                    for x in a.status()["capabilities"]
                    if x["capability"] == "rag.query@1.0"
                }
            ),
            timeout=60,
            what="A to see both corpora",
        )
        yield m
    finally:
        m.close()


def query(node: MeshNode, *extra: str) -> dict:
    return node.cli_json("query", WORD, "--corpus", "alpha", "--corpus", "beta", "-k", "4", *extra)


def test_keyword_mode_reaches_every_corpus_of_a_merged_query(mesh: LocalMesh) -> None:
    a = mesh.nodes["a"]
    out = query(a, "--mode", "keyword")
    assert [(c["corpus"], c["status"], c["hits"]) for c in out["corpora"]] == [
        ("alpha", "ok", 1),
        ("beta", "ok", 0),
    ]
    assert len(out["chunks"]) == 1
    (hit,) = out["chunks"]
    assert hit["corpus"] == "alpha" and WORD in hit["text"]
    assert hit["metadata"]["doc_filename"] == "mineral.md"
    assert [c["mode"] for c in out["corpora"]] == ["keyword", "keyword"]


def test_without_mode_each_host_ranks_by_its_default_and_dense_by_cosine(mesh: LocalMesh) -> None:
    a = mesh.nodes["a"]
    default = query(a)
    assert [c["mode"] for c in default["corpora"]] == ["hybrid", "hybrid"]
    dense = query(a, "--mode", "dense")
    assert [c["mode"] for c in dense["corpora"]] == ["dense", "dense"]
    # dense search answers with chunks of both corpora, the rare word or not
    assert {c["corpus"] for c in dense["chunks"]} == {"alpha", "beta"}
    assert len(dense["chunks"]) == 4


def test_one_corpus_and_several_take_the_same_options(mesh: LocalMesh) -> None:
    a = mesh.nodes["a"]
    one = a.cli_json("query", WORD, "--corpus", "alpha", "--mode", "keyword", "-k", "4")
    assert one["meta"]["mode"] == "keyword"
    assert [c["metadata"]["doc_filename"] for c in one["chunks"]] == ["mineral.md"]
    only = '{"doc_filename": "garden.md"}'
    several = query(a, "--mode", "dense", "--filter", only)
    assert {c["metadata"]["doc_filename"] for c in several["chunks"]} == {"garden.md"}
