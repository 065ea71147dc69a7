"""``hearthnet corpora``'s lines: node names with a short id, counts in good English, offline once.

The command itself runs against node processes in ``tests/integration/test_corpus_catalog.py``.
"""

from __future__ import annotations

import time

from hearthnet.frontends.cli.corpora import _corpus_line

NODE = "ed25519:Abcdefghijklmnopqrstuvwxyz0123456789"
OTHER = "ed25519:Zyxwvutsrqponmlkjihgfedcba9876543210"


def corpus(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "family",
        "docs": 3,
        "chunks": 41,
        "language_majority": "en",
        "embedding_model": "all-MiniLM-L6-v2",
        "node": NODE,
    }
    return {**base, **kw}


def test_a_line_names_the_node_by_name_and_short_id_and_counts_in_good_english() -> None:
    line = _corpus_line(corpus(docs=1, chunks=1), {NODE: "b-node"})
    assert "1 doc " in line and "1 chunk " in line and "1 docs" not in line
    assert line.rstrip().endswith("b-node (Abcdefghijkl)") and NODE not in line
    many = _corpus_line(corpus(), {})
    assert "3 docs" in many and "41 chunks" in many and many.rstrip().endswith("Abcdefghijkl")


def test_an_offline_host_is_said_offline_once_with_when() -> None:
    last = time.time() - 300
    line = _corpus_line(corpus(offline=True, last_seen=last, node_name="b-node", embedding_model=None), {})
    assert line.lower().count("offline") == 1 and "OFFLINE since " in line and "5 min ago" in line, line
    assert "b-node (Abcdefghijkl)" in line and "((" not in line
    unseen = _corpus_line(corpus(offline=True, last_seen=None), {})
    assert unseen.lower().count("offline") == 1 and "(OFFLINE: not seen since this node started)" in unseen


def test_duplicate_names_point_at_the_copy_queries_go_to_by_name() -> None:
    names = {NODE: "b-node", OTHER: "c-node"}
    dup = _corpus_line(corpus(node=OTHER, duplicate_of=NODE, hosts=[NODE, OTHER]), names)
    assert "queries go to the copy on b-node (Abcdefghijkl)" in dup
    main = _corpus_line(corpus(hosts=[NODE, OTHER]), names)
    assert "name also used on c-node (Zyxwvutsrqpo)" in main
