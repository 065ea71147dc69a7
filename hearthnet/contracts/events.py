"""Every event type a node stores: the community's own and each capability family's (the same
on every node, whatever it runs, or nodes would disagree about what to keep)."""

from __future__ import annotations

from hearthnet.community.membership import Membership
from hearthnet.community.rules import default_rules
from hearthnet.contracts.node_events import node_addresses_rule
from hearthnet.contracts.rag_events import deleted_rule, ingested_rule, moved_rule, updated_rule
from hearthnet.events.rules import EventRules

__all__ = ["community_rules", "register_family_event_rules"]


def register_family_event_rules(rules: EventRules[Membership]) -> None:
    """Event types services emit must be accepted on every node, whatever it runs."""
    rules.register(ingested_rule())
    rules.register(deleted_rule())
    rules.register(moved_rule())
    rules.register(updated_rule())
    rules.register(node_addresses_rule())


def community_rules() -> EventRules[Membership]:
    """The community's rules with every family's event types registered."""
    rules = default_rules()
    register_family_event_rules(rules)
    return rules
