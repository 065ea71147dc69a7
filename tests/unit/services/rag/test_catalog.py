"""Which documents the community's event log says are where: ingests, deletes by whom, re-ingests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.contracts.rag import DELETED, INGESTED
from hearthnet.contracts.rag_events import deleted_rule, ingested_rule, validate_deleted
from hearthnet.errors import BadRequest
from hearthnet.events import EventLog
from hearthnet.identity.keys import Identity
from hearthnet.services.rag.catalog import announced_hosts, documents_in_log, effective_ingest

FOUNDER = Identity.from_seed(b"F" * 32)
HOST = Identity.from_seed(b"H" * 32)
OTHER = Identity.from_seed(b"O" * 32)
D1 = "blake3:" + "11" * 32
D2 = "blake3:" + "22" * 32


def ingest(
    log: EventLog[Membership], who: Identity, doc: str, corpus: str = "family", chunks: int = 3
) -> str:
    data = {"corpus": corpus, "doc_cid": doc, "title": "T", "language": "en", "chunks": chunks}
    return log.append_local(who, INGESTED, data).event_id


def delete(log: EventLog[Membership], who: Identity, doc: str, corpus: str = "family") -> str:
    return log.append_local(who, DELETED, {"corpus": corpus, "doc_cid": doc}).event_id


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog[Membership]]:
    rules = default_rules()
    rules.register(ingested_rule())
    rules.register(deleted_rule())
    with EventLog(tmp_path / "events.db", rules=rules) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for who in (HOST, OTHER):
            log.append_local(FOUNDER, "member.invited", {"node_id": who.node_id, "level": "trusted"})
        yield log


def hosts(log: EventLog[Membership]) -> dict[str, dict[str, tuple[int, int]]]:
    announced = announced_hosts(documents_in_log(log), lambda n: log.membership().level_of(n) is not None)
    return {c: {h: (a.docs, a.chunks) for h, a in by.items()} for c, by in announced.items()}


def test_a_delete_by_the_host_cancels_its_ingest_and_a_later_ingest_is_in_effect_again(
    log: EventLog[Membership],
) -> None:
    first = ingest(log, HOST, D1)
    ingest(log, HOST, D2, chunks=5)
    assert effective_ingest(log, "family", D1, HOST.node_id) == first
    assert hosts(log) == {"family": {HOST.node_id: (2, 8)}}
    delete(log, HOST, D1)
    # the old event is still effective in the log's sense (it was allowed), but no longer in effect
    assert next(e.event_id for e in log.events_of_type(INGESTED, effective_only=True)) == first
    assert effective_ingest(log, "family", D1, HOST.node_id) is None
    assert hosts(log) == {"family": {HOST.node_id: (1, 5)}}
    again = ingest(log, HOST, D1)  # re-ingest after a delete: announced again, in effect again
    assert effective_ingest(log, "family", D1, HOST.node_id) == again != first
    assert hosts(log) == {"family": {HOST.node_id: (2, 8)}}


def test_only_the_host_or_an_anchor_can_take_a_document_off_the_view(log: EventLog[Membership]) -> None:
    ingest(log, HOST, D1)
    ingest(log, HOST, D2)
    delete(log, OTHER, D1)  # trusted, stored and relayed, but not the host: no effect
    assert effective_ingest(log, "family", D1, HOST.node_id) is not None
    delete(log, FOUNDER, D2)  # an anchor: off every copy
    assert effective_ingest(log, "family", D2, HOST.node_id) is None
    assert hosts(log) == {"family": {HOST.node_id: (1, 3)}}


def test_two_hosts_of_one_name_and_a_revoked_host_are_told_apart(log: EventLog[Membership]) -> None:
    ingest(log, HOST, D1)
    ingest(log, OTHER, D2)
    assert set(hosts(log)["family"]) == {HOST.node_id, OTHER.node_id}
    log.append_local(FOUNDER, "member.revoked", {"node_id": OTHER.node_id, "reason": "left", "cutoff_seq": 2})
    assert set(hosts(log)["family"]) == {HOST.node_id}  # its copy is gone for good


@pytest.mark.parametrize(
    "data",
    [
        {"corpus": "family"},
        {"corpus": "personal", "doc_cid": D1},
        {"corpus": "family", "doc_cid": "blake3:xyz"},
        {"corpus": "family", "doc_cid": D1, "title": "extra"},
    ],
)
def test_a_deletion_event_has_exactly_a_corpus_and_a_document(data: dict[str, str]) -> None:
    with pytest.raises(BadRequest):
        validate_deleted(data)
