"""The ``rag.document.ingested`` rule with the real validator: what a member may announce."""

from __future__ import annotations

from pathlib import Path

import pytest

from hearthnet.community.rules import default_rules
from hearthnet.contracts.rag import INGESTED
from hearthnet.contracts.rag_events import ingested_rule, validate_ingested
from hearthnet.errors import BadRequest
from hearthnet.events import EventLog
from hearthnet.identity.keys import Identity

FOUNDER = Identity.from_seed(b"F" * 32)
TRUSTY = Identity.from_seed(b"T" * 32)
CID = "blake3:" + "ab" * 32
GOOD = {"corpus": "family", "doc_cid": CID, "title": "Notes", "language": "pt-BR", "chunks": 3}


def test_a_well_formed_announcement_is_valid() -> None:
    validate_ingested(GOOD)


@pytest.mark.parametrize(
    "change",
    [
        {"corpus": "personal"},  # never announced by an honest node
        {"corpus": "system"},
        {"language": "e\x9bn"},  # an 8-bit terminal control sequence starter
        {"language": "en\u202e"},  # right-to-left override
        {"language": "en\x7f"},
        {"language": "en us"},
        {"language": ""},
    ],
)
def test_reserved_corpora_and_languages_that_are_not_codes_are_refused(change: dict[str, str]) -> None:
    with pytest.raises(BadRequest):
        validate_ingested({**GOOD, **change})


def test_events_of_one_type_can_be_asked_for_one_author(tmp_path: Path) -> None:
    rules = default_rules()
    rules.register(ingested_rule())
    with EventLog(tmp_path / "events.db", rules=rules) as log:
        log.append_local(FOUNDER, "community.created", {"name": "Hearth", "founder": FOUNDER.node_id})
        log.append_local(FOUNDER, "member.invited", {"node_id": TRUSTY.node_id, "level": "trusted"})
        mine = log.append_local(FOUNDER, INGESTED, GOOD)
        theirs = log.append_local(TRUSTY, INGESTED, {**GOOD, "chunks": 4})
        assert log.events_of_type(INGESTED) == [mine, theirs]
        assert log.events_of_type(INGESTED, author=TRUSTY.node_id) == [theirs]
        assert log.events_of_type(INGESTED, author=FOUNDER.node_id, effective_only=True) == [mine]
