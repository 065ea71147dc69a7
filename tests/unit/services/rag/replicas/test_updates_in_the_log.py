"""``rag.document.updated`` in the log: its rule (shape, who may sign it) and what the replica view
makes of it (the host's latest update after the ingest in effect; anyone else's changes no copy)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.contracts.rag import DELETED, INGESTED, UPDATED
from hearthnet.contracts.rag_events import (
    deleted_rule,
    ingested_rule,
    moved_rule,
    updated_rule,
    validate_updated,
)
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.events import EventLog
from hearthnet.identity.keys import Identity
from hearthnet.services.rag.replicas.log import corpus_view

FOUNDER = Identity.from_seed(b"F" * 32)
HOST = Identity.from_seed(b"H" * 32)
OTHER = Identity.from_seed(b"O" * 32)
MEMBER = Identity.from_seed(b"M" * 32)
D1 = "blake3:" + "11" * 32
DIGEST = "blake3:" + "ab" * 32
NEW_DIGEST = "blake3:" + "cd" * 32
UPDATE = {"corpus": "family", "doc_cid": D1, "title": "New", "metadata": {"year": 2024, "k": "v"}}


def test_an_update_event_has_a_bounded_shape() -> None:
    validate_updated(UPDATE)
    validate_updated({**UPDATE, "digest": NEW_DIGEST})
    validate_updated({**UPDATE, "metadata": {}})
    validate_updated({**UPDATE, "digest": NEW_DIGEST, "filename": "boiler manual.pdf"})
    validate_updated({**UPDATE, "filename": "odd\nname.txt"})  # any name a file may have, as rag.update
    bads = [
        {**UPDATE, "filename": ""},
        {**UPDATE, "filename": "x" * 256},
        {**UPDATE, "filename": "a/b.pdf"},
        {**UPDATE, "filename": 3},
        {**UPDATE, "digest": "x"},
        {**UPDATE, "corpus": "personal"},
        {**UPDATE, "doc_cid": "nope"},
        {**UPDATE, "title": "t" * 1001},
        {**UPDATE, "metadata": {"bad key": 1}},
        {**UPDATE, "metadata": {"hn_x": 1}},
        {**UPDATE, "metadata": {"x": [1]}},
        {**UPDATE, "metadata": {"x": float("inf")}},
        {**UPDATE, "metadata": {f"k{i}": i for i in range(33)}},
        {**UPDATE, "extra": 1},
        {k: v for k, v in UPDATE.items() if k != "metadata"},
    ]
    for bad in bads:
        with pytest.raises(BadRequest):
            validate_updated(bad)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog[Membership]]:
    rules = default_rules()
    for rule in (ingested_rule(), deleted_rule(), moved_rule(), updated_rule()):
        rules.register(rule)
    with EventLog(tmp_path / "events.db", rules=rules) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        for who, level in ((HOST, "trusted"), (OTHER, "trusted"), (MEMBER, "member")):
            log.append_local(FOUNDER, "member.invited", {"node_id": who.node_id, "level": level})
        yield log


def ingest(log: EventLog[Membership]) -> None:
    data = {
        "corpus": "family", "doc_cid": D1, "title": "Old", "language": "en", "chunks": 2,
        "digest": DIGEST, "embedding_model": "m", "dim": 4,
    }  # fmt: skip
    log.append_local(HOST, INGESTED, data)


def test_the_view_carries_the_hosts_latest_update_and_both_digests(log: EventLog[Membership]) -> None:
    ingest(log)
    assert corpus_view(log, "family").documents[0].updated is None
    log.append_local(HOST, UPDATED, {**UPDATE, "title": "First", "digest": "blake3:" + "ee" * 32})
    log.append_local(HOST, UPDATED, {**UPDATE, "digest": NEW_DIGEST})
    (facts,) = corpus_view(log, "family").documents
    assert facts.updated is not None and facts.updated.title == "New"
    assert facts.updated.metadata == {"year": 2024, "k": "v"} and facts.updated.filename is None
    log.append_local(HOST, UPDATED, {**UPDATE, "digest": NEW_DIGEST, "filename": "renamed.pdf"})
    (facts,) = corpus_view(log, "family").documents
    assert facts.updated is not None and facts.updated.filename == "renamed.pdf"
    log.append_local(HOST, UPDATED, {**UPDATE, "title": "Later", "digest": NEW_DIGEST})  # no rename
    (facts,) = corpus_view(log, "family").documents
    assert facts.updated is not None and facts.updated.title == "Later"
    assert facts.updated.filename == "renamed.pdf"  # the last rename still holds
    assert facts.digests == {DIGEST, NEW_DIGEST}  # a node that has not applied it may still serve it


def test_only_the_host_changes_its_copy_and_a_member_cannot_sign_an_update(log: EventLog[Membership]) -> None:
    ingest(log)
    log.append_local(OTHER, UPDATED, UPDATE)  # stored (trusted), but not the host's
    assert corpus_view(log, "family").documents[0].updated is None
    with pytest.raises(Unauthorized):
        log.append_local(MEMBER, UPDATED, UPDATE)


def test_an_update_before_a_new_ingest_does_not_apply_to_it(log: EventLog[Membership]) -> None:
    ingest(log)
    log.append_local(HOST, UPDATED, UPDATE)
    log.append_local(HOST, DELETED, {"corpus": "family", "doc_cid": D1})
    ingest(log)  # ingested afresh: its own title and metadata
    (facts,) = corpus_view(log, "family").documents
    assert facts.updated is None and facts.title == "Old"
