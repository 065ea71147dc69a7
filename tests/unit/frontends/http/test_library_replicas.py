"""The Library's rows say which copy of a corpus is a replica, how far behind, and how many its host has."""

from __future__ import annotations

from hearthnet.frontends.http.library import _replicas


def test_replicas_and_their_host_are_marked() -> None:
    known = [  # rag.known_corpora's corpora, as RagClient.known_corpora gives them
        {
            "name": "family",
            "hosts": [
                {"node": "H", "role": "host", "replica_of": None, "behind": 0},
                {"node": "R1", "role": "replica", "replica_of": "H", "behind": 0},
                {"node": "R2", "role": "replica", "replica_of": "H", "behind": 2},
            ],
        },
        {"name": "recipes", "hosts": [{"node": "H", "role": "host"}]},
    ]
    marks = _replicas(known)
    assert marks[("family", "R1")] == {"replica_of": "H", "behind": 0}
    assert marks[("family", "R2")] == {"replica_of": "H", "behind": 2}
    assert marks[("family", "H")] == {"replicas": 2}
    assert ("recipes", "H") not in marks
