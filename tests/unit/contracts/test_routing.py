"""contracts.routing: the node gives its bus every family's remote-provider rules."""

from __future__ import annotations

from hearthnet.bus.descriptors import ParamsPredicate
from hearthnet.bus.router import Preference
from hearthnet.contracts import llm, rag, rerank, routing


class _Taker:
    def __init__(self) -> None:
        self.predicates: dict[str, ParamsPredicate] = {}
        self.preferences: dict[str, Preference] = {}

    def register_predicate(self, capability: str, predicate: ParamsPredicate) -> None:
        self.predicates[capability] = predicate

    def register_preference(self, capability: str, preference: Preference) -> None:
        self.preferences[capability] = preference


def test_install_gives_every_family_rule() -> None:
    taker = _Taker()
    routing.install(taker)
    assert taker.predicates == {**rag.PREDICATES, **llm.PREDICATES, **rerank.PREDICATES}
    assert taker.preferences == rag.PREFERENCES
    assert "rag.ingest" in taker.predicates
    assert "llm.chat" in taker.predicates and "rerank.text" in taker.predicates


def test_the_bus_knows_no_rule_until_given() -> None:
    from hearthnet.bus.descriptors import shared_keys_equal

    taker = _Taker()
    assert taker.predicates == {}
    # Without a registered predicate the registry falls back to every shared key equal.
    assert shared_keys_equal({"corpus": "a"}, {"corpus": "a"})
    assert not shared_keys_equal({"corpus": "a"}, {"corpus": "b"})
