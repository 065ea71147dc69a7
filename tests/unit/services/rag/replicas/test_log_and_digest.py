"""The pure parts of replicas: the digest a signed ingest event carries, the event rules, what the log
says a replica must hold (deletes before their ingest, moves), and how callers rank a lagging copy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.contracts.rag import DELETED, INGESTED, MOVED, check_replicable, query_rank
from hearthnet.contracts.rag_events import (
    deleted_rule,
    ingested_rule,
    moved_rule,
    validate_ingested,
    validate_moved,
)
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.events import EventLog
from hearthnet.identity.keys import Identity
from hearthnet.services.rag.replicas.digest import document_digest
from hearthnet.services.rag.replicas.log import corpus_view
from hearthnet.services.rag.replicas.policy import ReplicaCap, ReplicaPolicy

FOUNDER = Identity.from_seed(b"F" * 32)
HOST = Identity.from_seed(b"H" * 32)
REPLICA = Identity.from_seed(b"R" * 32)
D1 = "blake3:" + "11" * 32
D2 = "blake3:" + "22" * 32
DIGEST = "blake3:" + "ab" * 32
BASE = {"corpus": "family", "doc_cid": D1, "title": "T", "language": "en", "chunks": 2}


def chunks() -> tuple[list[str], list[str], list[dict[str, object]], np.ndarray]:
    ids = ["c1", "c2"]
    texts = ["the hearth", "keeps warm"]
    metas: list[dict[str, object]] = [
        {"doc_cid": D1, "page": 1, "chunk_index": 0, "tokens": 3},
        {"doc_cid": D1, "page": 1, "chunk_index": 1, "ocr": True, "score_hint": 0.5},
    ]
    vectors = np.arange(8, dtype=np.float32).reshape(2, 4) / 10
    return ids, texts, metas, vectors


def test_the_digest_is_deterministic_and_changes_with_any_vector_text_id_or_metadata() -> None:
    ids, texts, metas, vectors = chunks()
    digest = document_digest(ids, texts, metas, vectors)
    assert digest.startswith("blake3:") and len(digest) == 7 + 64
    # metadata key order and a float64 copy of the vectors change nothing
    reordered = [dict(reversed(list(m.items()))) for m in metas]
    assert document_digest(ids, texts, reordered, vectors.astype(np.float64)) == digest
    tampered = vectors.copy()
    tampered[1, 3] = np.nextafter(tampered[1, 3], np.float32(1))  # one vector, one ulp
    assert document_digest(ids, texts, metas, tampered) != digest
    assert document_digest(["c1", "c3"], texts, metas, vectors) != digest
    assert document_digest(ids, ["the hearth", "keeps warn"], metas, vectors) != digest
    assert document_digest(ids, texts, [metas[0], {**metas[1], "page": 2}], vectors) != digest
    assert document_digest(ids[::-1], texts[::-1], metas[::-1], vectors[::-1]) != digest  # order counts


def test_ingest_events_with_and_without_the_digest_fields_are_valid_and_half_of_them_is_not() -> None:
    validate_ingested(BASE)  # an event from before replicas
    full = {**BASE, "digest": DIGEST, "embedding_model": "all-MiniLM-L6-v2", "dim": 384}
    validate_ingested(full)
    with pytest.raises(BadRequest):
        validate_ingested({**BASE, "digest": DIGEST})
    for bad in ({"digest": "blake3:xyz"}, {"dim": 0}, {"dim": 9000}, {"embedding_model": ""}):
        with pytest.raises(BadRequest):
            validate_ingested({**full, **bad})


def test_a_move_names_a_corpus_that_can_replicate_and_two_different_nodes() -> None:
    validate_moved({"corpus": "family", "from": HOST.node_id, "to": REPLICA.node_id})
    for bad in (
        {"corpus": "personal", "from": HOST.node_id, "to": REPLICA.node_id},
        {"corpus": "family", "from": HOST.node_id, "to": HOST.node_id},
        {"corpus": "family", "from": HOST.node_id, "to": "someone"},
        {"corpus": "family", "from": HOST.node_id},
    ):
        with pytest.raises(BadRequest):
            validate_moved(bad)


def test_personal_and_system_never_replicate() -> None:
    assert check_replicable("family") == "family"
    with pytest.raises(BadRequest, match="never replicates"):
        check_replicable("personal")
    with pytest.raises(BadRequest):
        check_replicable("system")


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog[Membership]]:
    rules = default_rules()
    for rule in (ingested_rule(), deleted_rule(), moved_rule()):
        rules.register(rule)
    with EventLog(tmp_path / "events.db", rules=rules) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for who in (HOST, REPLICA):
            log.append_local(FOUNDER, "member.invited", {"node_id": who.node_id, "level": "trusted"})
        yield log


def ingest(log: EventLog[Membership], doc: str, who: Identity = HOST) -> None:
    data = {**BASE, "doc_cid": doc, "digest": DIGEST, "embedding_model": "m", "dim": 4}
    log.append_local(who, INGESTED, data)


def test_the_view_is_the_hosts_documents_in_log_order_with_deletes_applied(log: EventLog[Membership]) -> None:
    ingest(log, D2)
    ingest(log, D1)
    view = corpus_view(log, "family")
    assert view.host == HOST.node_id
    assert [f.doc_cid for f in view.documents] == [D2, D1]
    assert view.documents[0].digest == DIGEST and view.documents[0].dim == 4
    log.append_local(HOST, DELETED, {"corpus": "family", "doc_cid": D2})
    assert [f.doc_cid for f in corpus_view(log, "family").documents] == [D1]
    assert corpus_view(log, "other").host is None


def test_a_delete_that_arrives_before_its_ingest_still_cancels_it(tmp_path: Path) -> None:
    """An anchor deleted the host's document; a replica receives the anchor's delete before the
    host's ingest (each author's events arrive in order, two authors' in any order)."""
    rules = default_rules()
    for rule in (ingested_rule(), deleted_rule(), moved_rule()):
        rules.register(rule)
    with EventLog(tmp_path / "host.db", rules=rules) as host_log:
        host_log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        host_log.append_local(FOUNDER, "member.invited", {"node_id": HOST.node_id, "level": "trusted"})
        ingest(host_log, D1)
        ingest(host_log, D2)
        host_log.append_local(FOUNDER, DELETED, {"corpus": "family", "doc_cid": D1})
        events = host_log.replay()
    with EventLog(tmp_path / "replica.db", rules=rules) as replica_log:
        assert corpus_view(replica_log, "family").host is None  # in no community yet: nothing
        replica_log.set_community(str(host_log.community_id))
        by_founder = [e for e in events if e.author == FOUNDER.node_id]
        by_host = [e for e in events if e.author == HOST.node_id]
        report = replica_log.ingest(by_founder)  # the delete first
        assert not report.rejected and by_founder[-1].event_type == DELETED
        assert corpus_view(replica_log, "family").documents == ()
        assert not replica_log.ingest(by_host).rejected
        assert [f.doc_cid for f in corpus_view(replica_log, "family").documents] == [D2]


def test_a_move_hands_the_documents_to_the_new_host(log: EventLog[Membership]) -> None:
    ingest(log, D1)
    with pytest.raises(Unauthorized):  # only an anchor moves a corpus
        log.append_local(HOST, MOVED, {"corpus": "family", "from": HOST.node_id, "to": REPLICA.node_id})
    log.append_local(FOUNDER, MOVED, {"corpus": "family", "from": HOST.node_id, "to": REPLICA.node_id})
    view = corpus_view(log, "family")
    assert view.host == REPLICA.node_id and view.moved_from == {HOST.node_id}
    assert [f.doc_cid for f in view.documents] == [D1]
    ingest(log, D2, who=REPLICA)  # the new host's writes count
    ingest(log, "blake3:" + "33" * 32, who=HOST)  # the old host's, made unaware of the move, do not
    assert [f.doc_cid for f in corpus_view(log, "family").documents] == [D1, D2]


def test_a_lagging_replica_ranks_below_every_fresh_provider() -> None:
    host = {"corpus": "family", "chunks": 120}
    fresh = {**host, "replica_of": "h", "behind": 0}
    lagging = {**host, "replica_of": "h", "behind": 2}
    further = {**host, "replica_of": "h", "behind": 5}
    assert query_rank(host) == query_rank(fresh) > query_rank(lagging) > query_rank(further)
    assert query_rank({"corpus": "family", "chunks": 0}) > query_rank(lagging)


def test_the_policy_survives_a_restart_and_the_cap_counts_distinct_replicas(tmp_path: Path) -> None:
    policy = ReplicaPolicy(("family",), tmp_path / "replicas.json")
    policy.add("recipes")
    policy.drop("family")
    assert ReplicaPolicy(("family",), tmp_path / "replicas.json").corpora() == ["recipes"]
    with pytest.raises(BadRequest):
        policy.add("personal")
    cap = ReplicaCap(1, tmp_path / "holders.json", HOST.node_id)
    cap.admit("family", REPLICA.node_id)
    cap.admit("family", REPLICA.node_id)  # the same replica again
    with pytest.raises(Exception, match="at most 1 replicas"):
        ReplicaCap(1, tmp_path / "holders.json", HOST.node_id).admit("family", FOUNDER.node_id)
